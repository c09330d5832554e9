"""The GDN interface check against the installed vLLM, and the environment caovan-vllm-serve gives the engine."""

import json
import os
import subprocess
import sys

import pytest

from caovan_kernels.serve import _additional_config, plugin_env
from caovan_kernels.vllm.seams import SEAMS, check_seams, select_seam


def test_every_known_seam_is_reported_with_a_reason():
    checks = check_seams()
    assert [c.name for c in checks] == [s.name for s in SEAMS]
    assert all(c.status in ("PASS", "SKIP") and c.reason for c in checks)


def test_installed_cpu_build_offers_the_pluggable_layer_seam():
    import vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn as gdn

    seam, cls = select_seam()
    assert seam.name == "qwen_gdn_pluggable_layer" and seam.cpu_path
    assert cls is gdn.QwenGatedDeltaNetAttention


def test_force_on_a_cpu_machine_turns_on_the_triton_interpreter():
    args = ["--additional-config", json.dumps({"caovan": True, "caovan_mode": "force"})]
    assert plugin_env(args, {}) == {"TRITON_INTERPRET": "1"}
    assert plugin_env(["--dtype", "bfloat16"], {}) == {}
    assert plugin_env([f"--additional-config={json.dumps({'caovan_require_turbo3': True})}"], {}) == {
        "CAOVAN_REQUIRE_TURBO3": "1"}


def test_broken_additional_config_is_refused_with_the_value():
    with pytest.raises(SystemExit, match="not valid JSON"):
        _additional_config(["--additional-config", "{caovan:true"])


def test_serve_usage_errors():
    run = [sys.executable, "-m", "caovan_kernels.serve"]
    assert subprocess.run(run, capture_output=True, text=True).returncode == 2
    bad = subprocess.run([*run, "--port", "8000"], capture_output=True, text=True)
    assert bad.returncode == 2 and "first argument must be the model" in bad.stderr
    ok = subprocess.run([*run, "--help"], capture_output=True, text=True)
    assert ok.returncode == 0 and "caovan-vllm-serve MODEL" in ok.stdout


def test_required_turbo3_without_a_seam_refuses_to_load():
    # The installed vLLM has the seam; hide its modules to stand in for a vLLM that has none.
    hide = ("import sys; [sys.modules.__setitem__(m, None) for m in ("
            "'vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn', "
            "'vllm.model_executor.layers.mamba.gdn_linear_attn', 'vllm.model_executor.models.qwen3_next')]; "
            "from caovan_kernels.vllm.plugin import register; register()")
    env = {"CAOVAN_REQUIRE_TURBO3": "1", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, env=env)
    assert run.returncode != 0
    assert "CAOVAN_REQUIRE_TURBO3=1 but this vLLM offers no GDN seam" in run.stderr
    relaxed = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, env={"PATH": "/usr/bin"})
    assert relaxed.returncode == 0 and "no GDN seam found, stock kernels" in relaxed.stderr


def test_plugin_config_is_made_explicit_and_user_keys_win():
    from caovan_kernels.serve import inject_plugin_config

    args = inject_plugin_config(["--dtype", "half"], {"CAOVAN_REQUIRE_TURBO3": "1"})
    assert args[:2] == ["--dtype", "half"] and args[2] == "--additional-config"
    assert json.loads(args[3]) == {"caovan": True, "caovan_mode": "auto", "caovan_turing_mma": "auto",
                                   "caovan_require_turbo3": True}
    user = json.dumps({"caovan_mode": "force", "gdn_prefill_backend": "triton"})
    for given in (["--additional-config", user], [f"--additional-config={user}"]):
        merged = inject_plugin_config([*given, "--port", "1"], {})
        assert merged[:2] == ["--port", "1"] and merged.count("--additional-config") == 1
        assert json.loads(merged[-1]) == {"caovan": True, "caovan_mode": "force", "caovan_turing_mma": "auto",
                                          "gdn_prefill_backend": "triton"}


def test_the_wrapper_takes_the_plugin_settings_before_the_profile_loads_the_plugin(monkeypatch):
    # Building vLLM's EngineArgs for the profile loads the plugin in the wrapper process too; seen on CUDA vLLM 0.21,
    # a hook-off engine's log began with "TensorCore75 ACTIVE mode=auto" from the wrapper.
    from caovan_kernels import serve

    # launch() writes to os.environ: setenv records the variable's state so it is restored after the test (a
    # delenv of an absent variable records nothing, and the off mode leaked into the session's engines)
    monkeypatch.setenv("CAOVAN_TURING_MMA", "auto")
    seen = {}
    monkeypatch.setattr(serve, "prepare", lambda model, args, env: seen.update(
        process=os.environ.get("CAOVAN_TURING_MMA"), env=env.get("CAOVAN_TURING_MMA")) or ([], env))
    serve.launch("model", ["--additional-config", json.dumps({"caovan_turing_mma": "off"})])
    assert seen == {"process": "off", "env": "off"}


def test_the_last_additional_config_is_the_one_read_as_vllm_reads_it():
    from caovan_kernels.serve import inject_plugin_config

    args = ["--additional-config", '{"caovan_mode": "force"}', "--dtype", "half",
            "--additional-config", '{"caovan_mode": "off"}']
    assert _additional_config(args) == {"caovan_mode": "off"}
    merged = inject_plugin_config(args, {})
    assert merged.count("--additional-config") == 1 and json.loads(merged[-1])["caovan_mode"] == "off"
