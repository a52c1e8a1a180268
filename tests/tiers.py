"""Test tiers: the README's `python -m pytest` runs the fast tier (`-m 'not slow'` in pyproject); `.ci/run` then
runs the slow tier (`python -m pytest -m slow -n 0`). Large sweeps keep a small instance in the fast tier and move the
rest of their cases to the slow tier, so every oracle still runs on every fast run."""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def tiered(cases: Iterable, fast: int) -> list:
    """Parametrize cases with the first `fast` in the fast tier and the others marked slow (test ids unchanged).
    Tuples stand for several argument names, as in `pytest.mark.parametrize`."""
    out = []
    for i, c in enumerate(cases):
        if i < fast:
            out.append(c)
        else:
            out.append(pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=pytest.mark.slow))
    return out


MOVED_TO_SLOW: dict[str, str] = {
    # Size, not coverage (#18 item 6: the fast tier in <= 3 minutes). Each entry is a test that took 2-17 s in the
    # fast tier on this machine (`pytest --durations=0`, quiet, at ac6d3d5) and whose file keeps a cheaper test of
    # the same behaviour there (named after the arrow). The slow tier, which CI runs too, still runs every one.
    "tests/test_systems_storage.py::test_disk_capacity_bounds_live_sandboxes_and_is_named":
        "16.6 s; the disk bound stays in the file's other tests",
    "tests/test_batch.py::test_grid_batch_matches_single_runs": "12.4 s -> test_kill_9_midway_then_rerun",
    "tests/test_batch.py::test_cli_sweep_and_crossover": "4.7 s -> test_batch_contract",
    "tests/test_batch.py::test_dask_matches_local": "3.5 s -> test_determinism worker modes (thread)",
    "tests/test_batch.py::test_crossover_agrees_with_dense_sweep": "3.4 s",
    "tests/test_api_workers.py::test_workers_exit_when_their_server_dies":
        "12.3 s -> test_solves_run_in_niced_worker_processes",
    "tests/test_limits.py::test_disconnect_while_waiting_gives_up_the_place[process]":
        "11.2 s -> test_disconnect_cancels_the_running_solve[process]",
    "tests/test_limits.py::test_disconnect_while_waiting_gives_up_the_place[thread]": "10.7 s (same)",
    "tests/test_limits.py::test_disconnect_cancels_the_running_solve[thread]": "10.8 s (same)",
    "tests/test_row_incremental.py::test_row_what_if_by_patterns_never_loses_throughput":
        "9.6 s -> test_unproven_what_if_says_at_least",
    "tests/test_determinism.py::test_backends_give_the_same_canonical_answer[mini-agent-r40x2-hybrid-max]":
        "8.8 s -> the other backend cases",
    "tests/test_determinism.py::test_batch_worker_modes_give_identical_rows": "4.0 s -> test_kill_9_midway_then_rerun",
    "tests/test_determinism.py::test_api_answers_as_in_process[process]": "3.8 s -> [thread]",
    "tests/test_api_bounds.py::test_report_list_pages_and_max_count_on_write": "8.0 s -> the other retention tests",
    "tests/test_api_bounds.py::test_report_links_relative_or_from_the_configured_base_never_the_host_header": "4.2 s",
    "tests/test_api_client.py::test_generated_client_calls_every_endpoint":
        "10.7 s (client generation) -> test_api_contract",
    "tests/test_report.py::test_no_internal_id_in_the_visible_report[rl_report]": "6.3 s -> [builtin_report]",
    "tests/test_report.py::test_catalog_text_is_escaped": "3.4 s -> test_security's hostile names",
    "tests/test_api.py::test_reports_persist_across_restart": "6.2 s -> test_api's report round trip",
    "tests/test_readme_api.py::test_readme_http_examples_run_as_written": "8.8 s -> test_api_contract",
    "tests/test_deadline.py::test_cli_wall_clock[command1]": "5.7 s -> test_cli_wall_clock[command0]",
    "tests/test_deadline.py::test_cli_wall_clock[command2]": "5.0 s (same)",
    "tests/test_deadline.py::test_api_wall_clock[/v1/compare]": "4.9 s -> test_api_wall_clock[/v1/optimize]",
    "tests/test_deadline.py::test_api_wall_clock[/v1/reports]": "3.8 s -> test_cli_report_wall_clock",
    "tests/test_deadline.py::test_batch_scenario_wall_clock": "5.0 s -> test_cli_wall_clock[command0]",
    "tests/test_measure_first.py::test_stage_sensitivity_is_computed": "2.5 s -> the README walkthrough",
    "tests/test_brownfield.py::test_report_has_the_migration_block_and_brownfield_sweeps":
        "5.0 s -> the file's optimizer and API tests",
    "tests/test_export.py::test_report_offers_the_artifacts": "3.9 s -> test_api_export",
    "tests/test_parallel.py::test_compare_side_by_side_equals_one_at_a_time[swe-agent-air-40kw-builtin]":
        "3.4 s -> [agent-r40-mini]",
    "tests/test_optimizer.py::test_hybrid_ge_b_ge_a_presets[swe-agent-liquid-130kw]": "3.2 s -> the other presets",
    # second pass, measured after the first (fast tier 241 s at fa32983)
    "tests/test_limits.py::test_disconnect_cancels_the_running_solve[process]":
        "2-11 s (a solve notices the cancel at its next check); the disconnect cases run in the slow tier only",
    "tests/test_deadline.py::test_api_wall_clock[/v1/optimize]": "5.3 s -> test_cli_wall_clock[command0]",
    "tests/test_deadline.py::test_cli_report_wall_clock": "3.7 s (same)",
    "tests/test_exact_memory.py::test_sweep_has_at_least_100_instances": "3.5 s -> test_memory_binding_mixed_skus_fast",
    "tests/test_determinism.py::test_api_answers_as_in_process[thread]": "3.5 s -> test_optimize_repeats_byte_identical",
    "tests/test_brownfield.py::test_api_optimize_and_compare_accept_existing": "2.8 s -> the file's service tests",
    "tests/test_batch_contract.py::test_all_solved_exits_0_and_strict_counts_infeasible":
        "2.8 s -> test_failed_scenarios_are_listed_and_exit_3",
    "tests/test_batch_contract.py::test_a_second_run_on_the_same_folder_exits_2_naming_the_holder": "2.6 s",
    "tests/test_api.py::test_api_key_required_when_set": "2.3 s -> test_api_bounds' empty-key test",
    "tests/test_tco.py::test_api_cost_objectives_over_http": "2.2 s -> test_cli_objective_and_text",
    # third pass (fast tier 181.9 s at the second)
    "tests/test_limits.py::test_solver_stops_on_its_time_limit_with_a_status[ortools]": "2.0 s (its 2 s limit) -> [cbc]",
    "tests/test_parallel.py::test_a_sweep_point_where_nothing_fits_is_an_infeasible_point":
        "2.2 s; an infeasible sweep point is checked in the slow tier only (here and in test_brownfield)",
    # fourth pass (fast tier 222.8 s at 4e38991, after #17's exactness tests joined it)
    "tests/test_determinism.py::test_cli_in_two_processes_matches_in_process":
        "2.0 s -> test_optimize_repeats_byte_identical (the CLI's own runs in test_cli_wall_clock[command0])",
    "tests/test_report.py::test_cli_report": "2.5 s -> test_measure_first's README walkthrough (advisor report from the CLI)",
    "tests/test_batch_contract.py::test_sigkill_of_the_coordinator_leaves_no_process_behind":
        "2.6 s -> test_batch's test_kill_9_midway_then_rerun",
    "tests/test_batch.py::test_heaviest_solves_are_dispatched_first":
        "2.7 s; the dispatch order is checked in the slow tier only (the batch itself in test_kill_9_midway_then_rerun)",
    "tests/test_groups.py::test_highs_backend_agrees_with_cbc_and_ortools":
        "2.7 s -> test_determinism's test_backends_agree_on_random_instances (CBC against OR-Tools)",
}
"""Fast-tier tests moved to the slow tier by node id (applied in conftest.py), with what keeps their behaviour in the
fast tier."""
