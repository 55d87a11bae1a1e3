"""What every load-test run in the tests must show: no error, nothing stuck, every round equal to its
solo run, every step done (`specviz.serving.loadtest.run`'s result)."""


def check_load_result(res: dict, sessions: int, steps_per_session: int, label: str, capsys) -> None:
    with capsys.disabled():
        print(f"\n{label}: {sessions} sessions, {res['steps']} steps in {res['wall_s']:.1f} s; "
              f"step latency p50 {1000 * res['p50_s']:.0f} ms, p95 {1000 * res['p95_s']:.0f} ms")
    assert not res["errors"], res["errors"]
    assert not res["stuck"], res["stuck"]
    assert not res["mismatches"], res["mismatches"]
    assert res["steps"] == sessions * steps_per_session
    assert res["ok"]
