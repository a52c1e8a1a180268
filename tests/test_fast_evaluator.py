"""The fast evaluator and the screening API agree with the reference (issue 18): to 1e-9 relative on random inputs.

The reference is the evaluator's previous implementation, kept in bench/reference_impl.py (scipy.stats cdf
bisection for task-time quantiles, the full convolution algorithm, no caches).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.catalog import builtin_catalog, load_configuration
from models.config import Configuration, OperatingPoint
from models.distributions import lognormal_mixture_quantiles
from models.pipeline import capacity_tasks_per_hour, evaluate
from models.queueing import Station, clear_caches, exact_mva
from models.screening import configuration_of, screen, server_menu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import reference_impl as ref

REL = 1e-9
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def close(a: float, b: float, rel: float = REL, abs_: float = 0.0) -> bool:
    return a == b or abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


def diff(a, b, path: str = "", abs_: float = 0.0) -> list[str]:
    """Where two dumped evaluations differ: numbers beyond REL relative, anything else at all."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys differ"]
        return [d for k in a for d in diff(a[k], b[k], f"{path}.{k}", abs_)]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths differ"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]", abs_)]
    if isinstance(a, float) and isinstance(b, float):
        return [] if close(a, b, abs_=abs_) else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


# ------------------------------------------------------------------------------------------------ quantiles

mixture = st.integers(1, 5).flatmap(lambda k: st.tuples(
    st.lists(st.floats(0.01, 1.0), min_size=k, max_size=k),
    st.lists(st.floats(1e-2, 1e5), min_size=k, max_size=k),
    st.lists(st.floats(1e-4, 10.0), min_size=k, max_size=k),
    st.lists(st.booleans(), min_size=k, max_size=k),
))


@settings(max_examples=80, deadline=None)
@given(mix=mixture, q=st.floats(0.01, 0.999))
def test_quantiles_match_reference_bisection(mix, q):
    raw_w, means, cvs, degenerate = mix
    w = [x / sum(raw_w) for x in raw_w]
    # cv 0 (a step in the cdf) on some components exercises the degenerate path too
    variances = [0.0 if d and i == 0 else (c * m) ** 2 for i, (m, c, d) in enumerate(zip(means, cvs, degenerate))]
    qs = [0.5, 0.95, 0.99, q]
    got_small = lognormal_mixture_quantiles(w, means, variances, qs)
    got_vec = lognormal_mixture_quantiles(np.array(w), np.tile(means, (len(qs), 1)),
                                          np.tile(variances, (len(qs), 1)), np.array(qs))
    for x, a, b in zip(qs, got_small, got_vec):
        want = ref.lognormal_mixture_quantile(w, means, variances, x)
        for got in (a, b):
            if close(got, want):
                continue
            # allowed only where the cdf is flat around the quantile (components far apart): every t in the flat
            # stretch solves F(t) = q to float precision, so the residuals are compared instead of t
            assert not well_conditioned(w, means, variances, want), (x, got, want)
            assert abs(mixture_cdf(w, means, variances, got) - x) <= 1e-12, (x, got, want)


def mixture_cdf(w, means, variances, t: float) -> float:
    from scipy.stats import norm

    tot = 0.0
    for wk, m, v in zip(w, means, variances):
        s2 = math.log1p(v / (m * m))
        mu = math.log(m) - s2 / 2
        tot += wk * (float(norm.cdf((math.log(t) - mu) / math.sqrt(s2))) if s2 > 0 else float(math.log(t) >= mu))
    return tot


def well_conditioned(w, means, variances, t: float) -> bool:
    """Relative change of the quantile per unit change of q is below 1e4 (t f(t) >= 1e-4): the 1e-9 agreement
    then reflects the solvers, not float noise in the cdf."""
    dens = 0.0
    for wk, m, v in zip(w, means, variances):
        s2 = math.log1p(v / (m * m))
        if s2 <= 0:
            return False
        mu, sg = math.log(m) - s2 / 2, math.sqrt(s2)
        z = (math.log(t) - mu) / sg
        dens += wk * math.exp(-0.5 * z * z) / (sg * math.sqrt(2 * math.pi))  # density of log t
    return dens >= 1e-4


def test_vectorized_quantiles_over_many_mixtures():
    rng = np.random.default_rng(18)
    p, k = 500, 3
    w = rng.dirichlet(np.ones(k))
    m = 10 ** rng.uniform(-1, 4, (p, k))
    v = (m * 10 ** rng.uniform(-2, 1, (p, k))) ** 2
    qs = rng.uniform(0.05, 0.995, p)
    got = lognormal_mixture_quantiles(w, m, v, qs)
    for i in range(0, p, 25):
        assert close(got[i], ref.lognormal_mixture_quantile(w, m[i], v[i], qs[i])), i


# ------------------------------------------------------------------------------------------------ closed networks


def _gpu_like(l0: float, d: float, b_max: int, replicas: int):
    def alpha(n):
        b = np.minimum(np.asarray(n, dtype=float) / replicas, b_max)
        return replicas * b * l0 / (l0 + np.maximum(b - 1.0, 0.0) * d)

    return alpha


def _servers(c: int):
    return lambda n: np.minimum(np.asarray(n, dtype=float), c)


station = st.one_of(
    st.tuples(st.just("gpu"), st.floats(0.1, 100.0), st.floats(1e-3, 0.3), st.integers(8, 256), st.integers(1, 16)),
    st.tuples(st.just("cpu"), st.floats(0.1, 1000.0), st.integers(1, 3000)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(station, min_size=1, max_size=3), think=st.one_of(st.just(0.0), st.floats(0.1, 1000.0)),
       n=st.integers(1, 1500), queue_lengths=st.booleans())
def test_exact_mva_matches_reference(specs, think, n, queue_lengths):
    stations = []
    for i, s in enumerate(specs):
        if s[0] == "gpu":
            stations.append(Station(f"g{i}", s[1], _gpu_like(1.0, s[2], s[3], s[4])))
        else:
            stations.append(Station(f"c{i}", s[1], _servers(s[2])))
    clear_caches()
    got = exact_mva(stations, think, n, queue_lengths)
    want = ref.exact_mva(stations, think, n, queue_lengths)
    assert close(got.throughput, want.throughput), (got.throughput, want.throughput)
    if queue_lengths:
        for a, b in zip(got.queue_length, want.queue_length):
            assert close(float(a), float(b), abs_=1e-9 * n), (got.queue_length, want.queue_length)
    # a second call is answered from the cache with the same numbers
    again = exact_mva(stations, think, n, queue_lengths)
    assert again.throughput == got.throughput


# ------------------------------------------------------------------------------------------------ evaluate


@pytest.fixture(scope="module")
def cat():
    return builtin_catalog()


def _example_configs():
    out = []
    for f in sorted(EXAMPLES.glob("*.yaml")):
        try:
            out.append(load_configuration(f))
        except Exception:  # noqa: BLE001 - scenario files are not configurations
            continue
    return out


CONFIGS = _example_configs()
operating_point = st.one_of(
    st.just(None),
    st.builds(OperatingPoint, agents=st.integers(1, 400)),
    st.builds(OperatingPoint, load_fraction=st.floats(0.05, 0.95)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, len(CONFIGS) - 1), scale=st.lists(st.floats(0.2, 2.0), min_size=4, max_size=4),
       op=operating_point)
def test_evaluate_matches_previous_implementation(cat, which, scale, op):
    base = CONFIGS[which]
    servers = [g.model_copy(update={"count": max(1, round(g.count * f))}) for g, f in zip(base.servers, scale)]
    cfg = base.model_copy(update={"servers": servers, **({"operating_point": op} if op is not None else {})})
    cfg = Configuration.model_validate(cfg.model_dump())
    w, r = cat.workloads[cfg.workload], cat.racks[cfg.rack]
    clear_caches()
    fast = evaluate(cfg, w, r, cat)
    with ref.previous_implementation():
        prev = evaluate(cfg, w, r, cat)
    # 1e-9 relative; 1e-9 absolute (a nanosecond, a 1e-9 share) for figures that are differences near zero: a
    # closed-loop wait is residence minus service time, with ~1e-12 s of cancellation noise either way
    problems = diff(fast.model_dump(mode="json"), prev.model_dump(mode="json"), abs_=1e-9)
    assert not problems, problems[:5]


# ------------------------------------------------------------------------------------------------ screening


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, len(CONFIGS) - 1), seed=st.integers(0, 2**31 - 1))
def test_screening_matches_evaluate(cat, which, seed):
    base = CONFIGS[which]
    w, r = cat.workloads[base.workload], cat.racks[base.rack]
    menu = server_menu(w, r, cat, base.servers, base.queues)
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 2 * np.array([g.count for g in base.servers]) + 2, size=(8, len(base.servers)))
    sc = screen(menu, counts)
    names = sc.bottleneck_names()
    for i, row in enumerate(counts):
        if row.sum() == 0:
            continue
        ev = evaluate(configuration_of(menu, row), w, r, cat)
        # the screen gives the capacity bounds; the sandboxes' loaded-time loop below them needs the closed network
        listed = {b.name: b.tasks_per_hour for b in ev.bounds if not b.name.startswith("sandboxes:")}
        screened = {nm: float(sc.bounds[i, j]) for j, nm in enumerate(sc.bound_names)
                    if not math.isnan(sc.bounds[i, j])}
        assert listed.keys() == screened.keys(), (row, listed, screened)
        for nm, v in listed.items():
            assert close(screened[nm], v), (nm, screened[nm], v)
        assert close(float(sc.throughput_tasks_per_hour[i]), capacity_tasks_per_hour(ev))
        assert float(sc.throughput_tasks_per_hour[i]) >= ev.throughput_tasks_per_hour * (1 - REL)
        assert names[i] == (ev.next_bottleneck if ev.bottleneck.startswith("sandboxes:") else ev.bottleneck)
        assert close(float(sc.power_w[i]), ev.power_w)
        assert close(float(sc.air_heat_w[i]), ev.air_heat_w)
        assert close(float(sc.liquid_heat_w[i]), ev.liquid_heat_w)
        assert int(sc.space_u[i]) == ev.space_u
        assert bool(sc.within_budgets[i]) == ev.within_budgets


def test_screening_rejects_bad_counts(cat):
    base = CONFIGS[0]
    menu = server_menu(cat.workloads[base.workload], cat.racks[base.rack], cat, base.servers, base.queues)
    with pytest.raises(ValueError, match="expected shape"):
        screen(menu, np.zeros((3, len(base.servers) + 1)))
    with pytest.raises(ValueError, match=">= 0"):
        screen(menu, -np.ones((1, len(base.servers))))


def test_exact_mva_many_servers_no_underflow():
    """Three stations of 992 servers each, N = 992: no task ever queues, X = N / (Z + sum D) = 248/s exactly. A tilt
    from the stations' rates alone (992/s) made (X / tilt)^N underflow and both implementations answer inf or nan
    (found by Hypothesis)."""
    stations = [Station(f"c{i}", 1.0, _servers(992)) for i in range(3)]
    clear_caches()
    for impl in (exact_mva, ref.exact_mva):
        res = impl(stations, 1.0, 992, True)
        assert res.throughput == pytest.approx(248.0, rel=1e-9)
        assert np.allclose(res.queue_length, 248.0, rtol=1e-9)
