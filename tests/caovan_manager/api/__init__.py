# Where TestClient sends its requests: the daemon serves IP addresses and its own names, not TestClient's default
# "testserver" (api.door refuses foreign Host names, as DNS rebinding sends them).
LOCAL = "http://127.0.0.1"
