"""Alerts fire once per upward crossing, re-arm below the level; peak and time above are exact."""

from __future__ import annotations

import pytest

from kvspill.monitor.alerts import AlertTracker

WALK = [80, 86, 87, 91, 96, 84, 86]


def test_walk_raises_one_alert_per_crossing():
    tracker = AlertTracker()
    raised = [tracker.update(float(t), 0, p) for t, p in enumerate(WALK)]
    assert [[a.level_percent for a in r] for r in raised] == [[], [85.0], [], [90.0], [95.0], [], [85.0]]
    assert [a.timestamp for a in tracker.alerts] == [1.0, 3.0, 4.0, 6.0]
    gpu = tracker.summary()["gpus"]["0"]
    assert gpu["peak_percent"] == 96
    assert gpu["num_alerts"] == 4
    # sample-and-hold: t=1..5 at or above 85, t=3..5 above 90, t=4..5 above 95
    assert gpu["seconds_above"] == {"85": 4.0, "90": 2.0, "95": 1.0}


def test_hovering_above_a_level_does_not_repeat():
    tracker = AlertTracker()
    for t, p in enumerate([86, 89, 85, 88, 86]):
        tracker.update(float(t), 0, p)
    assert [a.level_percent for a in tracker.alerts] == [85.0]


def test_a_jump_over_several_levels_names_each_once():
    tracker = AlertTracker()
    assert [a.level_percent for a in tracker.update(0.0, 0, 97)] == [85.0, 90.0, 95.0]
    assert tracker.update(1.0, 0, 98) == []


def test_gpus_are_tracked_apart():
    tracker = AlertTracker()
    tracker.update(0.0, 0, 86)
    assert [a.gpu_index for a in tracker.update(0.0, 1, 86)] == [1]


def test_levels_must_rise():
    with pytest.raises(ValueError, match="rising"):
        AlertTracker([90, 85])


def test_session_on_a_fake_gpu_gives_the_same_alerts(make_session):
    session = make_session(WALK)
    alerts = [a for _ in WALK for a in session.step()[1]]
    assert [(a.level_percent, a.timestamp) for a in alerts] == [
        (85.0, 1001.0),
        (90.0, 1003.0),
        (95.0, 1004.0),
        (85.0, 1006.0),
    ]
    report = session.report(*session.step())
    assert report["session"]["num_alerts"] == 4
    assert report["session"]["gpus"]["0"]["peak_percent"] == pytest.approx(96, abs=0.01)
