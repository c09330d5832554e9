"""The SQLite store: runs, restarts, activations and the active version survive a reopen."""

from caovan_manager.store import Store


def test_records_survive_a_reopen(tmp_path):
    path = tmp_path / "state" / "caovan.sqlite3"
    store = Store(path)
    assert store.next_run_id() == 1 and store.active_version() is None
    store.record_run(1, None)
    store.record_restart(1, "crash", "the engine exited with code -9")
    store.record_run_end(1, -9, "the engine exited with code -9")
    store.record_activation(None, "0.2.0", "rolled_back", "throughput fell", {"baseline": {"tokens_per_s": 5.0}})
    store.save_active_version("0.2.0")
    store.close()

    again = Store(path)
    assert again.next_run_id() == 2
    assert again.active_version() == "0.2.0"
    run = again.runs()[0]
    assert (run["run_id"], run["returncode"], run["reason"]) == (1, -9, "the engine exited with code -9")
    assert again.restarts()[0]["cause"] == "crash"
    activation = again.activations()[0]
    assert activation["outcome"] == "rolled_back" and activation["details"]["baseline"]["tokens_per_s"] == 5.0
    again.save_active_version(None)
    assert again.active_version() is None
