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


def test_history_is_bounded_and_unfinished_runs_stay(tmp_path, monkeypatch):
    from caovan_manager import store as store_module

    monkeypatch.setattr(store_module, "RETAIN", 5)
    store = Store(tmp_path / "caovan.sqlite3")
    store.record_run(1, None)
    store.record_run_pid(1, 4242)  # never ended: an engine a dead daemon left, still to be reaped
    for run_id in range(2, 40):
        store.record_run(run_id, None)
        store.record_run_end(run_id, 0, "stopped")
        store.record_restart(run_id, "requested", "soak")
        store.record_activation(None, "0.2.0", "activated", "verified", {})
    assert [row["run_id"] for row in store.runs(100)] == [39, 38, 37, 36, 35, 1]
    assert len(store.restarts(100)) == 5 and len(store.activations(100)) == 5
    assert [row["run_id"] for row in store.unfinished_runs()] == [1]
    assert store.next_run_id() == 40
