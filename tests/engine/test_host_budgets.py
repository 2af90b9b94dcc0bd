"""The budget flags against the host (engine/host_budgets.py): one line naming the flag, its value
and what the host has; nothing to check for a budget of None or 0; the engine's pre-flight stops
on them before anything loads."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from kvspill.config import EngineConfig
from kvspill.engine.checks import preflight
from kvspill.engine.host_budgets import (
    HostBudgetError,
    check_budgets,
    check_cpu_kv_budget,
    check_disk_kv_budget,
    check_vram_budget,
    flag_value,
    visible_card,
)
from kvspill.errors import DiskTierError

GiB = 2**30


def test_flag_values_read_as_the_flag_takes_them() -> None:
    assert flag_value(100 * GiB) == "100GiB"
    assert flag_value(int(5.8 * GiB)) == "5.8GiB"
    assert flag_value(512 * 2**20) == "512MiB"
    assert flag_value(100 * 2**40) == "100TiB"


def test_a_cpu_tier_over_the_available_ram_is_one_line() -> None:
    with pytest.raises(HostBudgetError) as info:
        check_cpu_kv_budget(100 * GiB, available_bytes=int(21.3 * GiB))
    message = str(info.value)
    assert message.startswith("--cpu-kv-budget 100GiB is more than the 21.3 GiB of RAM available: ")
    assert "\n" not in message
    check_cpu_kv_budget(20 * GiB, available_bytes=int(21.3 * GiB))  # fits: no error


@pytest.mark.parametrize("budget", [None, 0])
def test_no_budget_is_nothing_to_check(budget: int | None) -> None:
    check_cpu_kv_budget(budget, available_bytes=0)
    check_disk_kv_budget("/nonexistent/never/created", budget)
    check_vram_budget(budget, "cuda", card=(1, "cuda:0 (tiny)"))


def test_a_disk_tier_over_the_free_disk_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(DiskTierError) as info:
        check_disk_kv_budget(str(tmp_path), 10**18)
    message = str(info.value)
    assert message.startswith("--disk-kv-budget ") and f"free in {tmp_path}: " in message
    check_disk_kv_budget(str(tmp_path), 2**20)


def test_an_unwritable_disk_tier_directory_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(DiskTierError, match="give a writable --kv-disk-dir"):
        check_disk_kv_budget(str(blocker / "kv"), 2**20)


def test_a_vram_budget_over_the_card_names_the_card() -> None:
    card = (int(139.8 * GiB), "cuda:0 (NVIDIA H200)")
    with pytest.raises(HostBudgetError) as info:
        check_vram_budget(200 * GiB, "cuda", card=card)
    assert str(info.value).startswith(
        "--vram-budget 200GiB is more than the 139.8 GiB of memory on cuda:0 (NVIDIA H200): "
    )
    check_vram_budget(16 * GiB, "cuda", card=card)
    check_vram_budget(200 * GiB, "cpu", card=card)  # the cpu device uses no card


def test_cuda_visible_devices_maps_cuda_indexes_to_nvml_cards() -> None:
    assert visible_card(1, None) == 1
    assert visible_card(0, "3,2") == 3 and visible_card(1, "3,2") == 2
    assert visible_card(0, "GPU-5ab1") == "GPU-5ab1"
    assert visible_card(2, "3,2") is None  # CUDA sees two cards
    assert visible_card(0, "") is None and visible_card(0, "-1") is None


def test_the_engine_preflight_stops_on_a_budget_before_loading() -> None:
    too_much = psutil.virtual_memory().total + GiB
    config = EngineConfig(device="cpu", cpu_kv_budget_bytes=too_much)
    with pytest.raises(HostBudgetError, match="--cpu-kv-budget"):
        check_budgets(config)
    with pytest.raises(HostBudgetError, match="--cpu-kv-budget"):
        preflight(config)
