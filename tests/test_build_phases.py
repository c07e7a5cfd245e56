"""``FusedKernel.build_phases``: where a build's seconds went, each phase counted without the phases nested in it."""

from __future__ import annotations

import time

import torch
from conftest import INTERPRETER_WARNINGS

import amk
from amk.build_phases import PHASES, phase, recording

pytestmark = INTERPRETER_WARNINGS


def test_nested_phases_are_counted_once():
    with recording() as clock:
        with phase("time"):
            time.sleep(0.05)
            with phase("compile"):
                time.sleep(0.1)
        with phase("verify"):
            pass
    assert 0.1 <= clock.seconds["compile"] < 0.15 and 0.05 <= clock.seconds["time"] < 0.1
    assert clock.open == [] and "compile 0.1s" in clock.summary()


def test_a_nested_recording_counts_its_own_phases_and_adds_them_to_the_enclosing_one():
    """A build inside a caller's recording (and inside its open phase) reports only its own seconds; the caller's
    clock gets them as they were, and its open phase does not count them again."""
    with recording() as outer:
        with phase("verify"):
            time.sleep(0.05)
            with recording() as inner:
                with phase("compile"):
                    time.sleep(0.1)
            time.sleep(0.05)
    assert inner.seconds["verify"] == 0 and 0.1 <= inner.seconds["compile"] < 0.15
    assert 0.1 <= outer.seconds["compile"] < 0.15 and 0.1 <= outer.seconds["verify"] < 0.15


def test_phases_outside_a_recording_only_run_their_body():
    ran = []
    with phase("emit"):
        ran.append(True)
    assert ran == [True]


def test_a_build_reports_its_phases_and_a_cache_hit_has_none(tmp_path):
    settings = amk.TunerConfig(target_cache_dir=tmp_path)
    ops, shapes = ["matmul", "add_bias", "layernorm"], [(4, 32), (32, 64), (64,), (64,), (64,)]
    built = amk.build_fused_kernel(ops, shapes, torch.float32, verify=True, tuner_config=settings)
    assert set(built.build_phases) == {*PHASES, "total"}
    assert built.build_phases["emit"] > 0 and built.build_phases["verify"] > 0
    assert sum(built.build_phases[name] for name in PHASES) <= built.build_phases["total"]
    again = amk.build_fused_kernel(ops, shapes, torch.float32, verify=True, tuner_config=settings)
    assert again.cache_hit and again.build_phases["emit"] == 0
