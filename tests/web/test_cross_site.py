"""A real browser on another site attacks the daemon: a page served from another origin (another port of this
machine) auto-submits a form POST and fires no-cors fetches at the keyless daemon's /start, /stop and /restart, as
any page open in the operator's browser could. Nothing may act: the engine stays stopped, no run is started."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from selenium.webdriver.common.by import By

from tests.support.served import served_daemon
from tests.web.browser import INSTALL_HINT, chromium, missing_tools, wait

ATTACK = """<!doctype html><html><body>
<form id="f" method="post" action="{daemon}/start"><input name="reason" value="cross-site"></form>
<script>
  const sent = [];
  for (const path of ["/start", "/restart", "/stop", "/plugins/bundled/activate", "/models/caovan-demo/canary"]) {{
    sent.push(fetch("{daemon}" + path, {{method: "POST", mode: "no-cors", body: "{{}}"}}).catch(() => null));
    sent.push(fetch("{daemon}" + path, {{method: "POST", mode: "no-cors",
      headers: {{"Content-Type": "application/x-www-form-urlencoded"}}, body: "reason=x"}}).catch(() => null));
  }}
  Promise.all(sent).then(() => {{ document.title = "fetched"; document.getElementById("f").submit(); }});
</script></body></html>"""


def serve_page(html: str) -> tuple[http.server.HTTPServer, str]:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_page_of_another_site_cannot_start_or_restart_a_keyless_daemon(tmp_path):
    if missing_tools():
        pytest.fail(f"missing {missing_tools()}: {INSTALL_HINT}")
    with served_daemon(tmp_path) as served:
        machine = served.daemon.primary.machine
        before = (machine.state, machine.run)
        server, origin = serve_page(ATTACK.format(daemon=served.url))
        try:
            with chromium() as driver:
                driver.get(f"{origin}/")
                wait(driver, 20, lambda: driver.title == "fetched" or served.url in driver.current_url,
                     "the attack page did not run")
                # The form's navigation lands on the daemon's refusal.
                wait(driver, 20, lambda: served.url in driver.current_url, "the form was not submitted")
                refusal = driver.find_element(By.TAG_NAME, "body").text
                assert "cross-site request refused" in refusal, refusal
            time.sleep(1)  # anything accepted would have been decided by now
            assert (machine.state, machine.run) == before, "a cross-site request acted"
        finally:
            server.shutdown()
