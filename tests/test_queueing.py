"""models.queueing against textbook reference values and independent implementations written here.

Every oracle in this file is computed without calling the function under test: Erlang C from its defining sum
(exact rational arithmetic), M/M/c waits from the closed-form distribution, closed networks from a classic
fixed-rate MVA recursion, from a published worked example, and from a brute-force CTMC solved numerically.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.queueing import (
    Station,
    arrival_queue_pmf,
    birth_death_mean_number,
    closed_loop_fixed_point,
    closed_loop_scale,
    closed_network_rates,
    ERLANG_RECURSION_MAX_SERVERS,
    erlang_c,
    exact_mva,
    max_arrival_for_wait,
    mmc_mean_wait,
    mmc_wait_quantile,
    mmc_wait_second_moment,
    multiserver_wait_moments,
    variability_station,
)

# ----------------------------------------------------------------------------------------------------------------
# Independent reference formulas
# ----------------------------------------------------------------------------------------------------------------


def erlang_c_exact(c: int, a: Fraction | int) -> Fraction:
    """Erlang C from its definition (Kleinrock vol. 1, eq. 3.40), in exact rational arithmetic:

    C(c, a) = [a^c / c! * c / (c - a)] / [sum_{k=0}^{c-1} a^k / k! + a^c / c! * c / (c - a)].
    """
    a = Fraction(a)
    top = a**c / math.factorial(c) * Fraction(c) / (c - a)
    bottom = sum(a**k / math.factorial(k) for k in range(c)) + top
    return top / bottom


def erlang_c_float(c: int, a: float) -> float:
    """Same definition in floats (for non-rational loads), summed in log space to avoid overflow."""
    logs = [k * math.log(a) - math.lgamma(k + 1) for k in range(c)]
    log_top = c * math.log(a) - math.lgamma(c + 1) + math.log(c / (c - a))
    m = max(logs + [log_top])
    top = math.exp(log_top - m)
    return top / (sum(math.exp(v - m) for v in logs) + top)


def fixed_rate_mva(demands: list[float], think: float, n_max: int):
    """Classic exact MVA for single-server fixed-rate stations plus a delay (Reiser & Lavenberg 1980):
    R_k(n) = D_k (1 + Q_k(n-1)); X(n) = n / (Z + sum R_k(n)); Q_k(n) = X(n) R_k(n)."""
    q = [0.0] * len(demands)
    xs = []
    r = [0.0] * len(demands)
    for n in range(1, n_max + 1):
        r = [d * (1.0 + qk) for d, qk in zip(demands, q)]
        x = n / (think + sum(r))
        q = [x * rk for rk in r]
        xs.append(x)
    return np.array(xs), np.array(q), np.array(r)


def ctmc_closed_cycle(demands, rates, think, population, marginals: bool = False):
    """Brute force: the CTMC of a closed cyclic network delay -> station 1 -> ... -> station K -> delay.

    Station k with n tasks completes at rate alpha_k(n) / D_k; the delay station (infinite server, mean Z) at rate
    n / Z. States are all compositions of the population; the stationary vector solves pi Q = 0, sum pi = 1 with a
    dense linear solve (no product-form assumption is used). Returns throughput and mean number at each station.
    """
    k = len(demands)
    parts = k + 1  # index 0 is the delay station
    states = [s for s in itertools.product(range(population + 1), repeat=parts) if sum(s) == population]
    index = {s: i for i, s in enumerate(states)}
    q = np.zeros((len(states), len(states)))

    def out_rate(state, j):
        n = state[j]
        if n == 0:
            return 0.0
        if j == 0:
            return n / think
        return float(rates[j - 1](n)) / demands[j - 1]

    for s in states:
        i = index[s]
        for j in range(parts):
            rate = out_rate(s, j)
            if rate == 0.0:
                continue
            t = list(s)
            t[j] -= 1
            t[(j + 1) % parts] += 1
            q[i, index[tuple(t)]] += rate
            q[i, i] -= rate
    a = np.vstack([q.T, np.ones(len(states))])
    b = np.zeros(len(states) + 1)
    b[-1] = 1.0
    pi, *_ = np.linalg.lstsq(a, b, rcond=None)
    means = np.array([sum(pi[index[s]] * s[j] for s in states) for j in range(parts)])
    x = means[0] / think  # completions of the delay station = tasks per second
    if marginals:  # P(n_k = j) for each station k (delay excluded), j = 0..population
        dists = np.zeros((k, population + 1))
        for s in states:
            for j in range(k):
                dists[j, s[j + 1]] += pi[index[s]]
        return x, means[1:], dists
    return x, means[1:]


def mmc_mean_number_in_system(c: int, lam: float, mu: float) -> float:
    """L = Lq + a for M/M/c, Lq = C(c, a) rho / (1 - rho) (Kleinrock vol. 1, sec. 3.5)."""
    a = lam / mu
    rho = a / c
    return erlang_c_float(c, a) * rho / (1 - rho) + a


# ----------------------------------------------------------------------------------------------------------------
# Erlang C
# ----------------------------------------------------------------------------------------------------------------

# Published Erlang C values (e.g. the Erlang C tables in Kleinrock vol. 1 and standard call-centre tables).
ERLANG_C_TABLE = [
    (2, 1, 1.0 / 3.0, 1e-12),
    (5, 4, 0.5541, 5e-5),
    (10, 8, 0.4092, 5e-5),
]


@pytest.mark.parametrize("c, a, published, tol", ERLANG_C_TABLE)
def test_erlang_c_matches_published_table(c, a, published, tol):
    exact = erlang_c_exact(c, a)
    # The independent formula reproduces the printed value ...
    assert float(exact) == pytest.approx(published, abs=tol)
    # ... and the module reproduces the independent formula to float precision.
    assert erlang_c(c, a) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize("c", [ERLANG_RECURSION_MAX_SERVERS, ERLANG_RECURSION_MAX_SERVERS + 1, 200, 1000])
@pytest.mark.parametrize("rho", [Fraction(1, 10), Fraction(1, 2), Fraction(9, 10), Fraction(99, 100)])
def test_erlang_c_both_branches_match_the_exact_definition(c, rho):
    # Few servers use the recursion, many the Poisson closed form: both must agree with exact arithmetic.
    a = rho * c
    assert erlang_c(c, float(a)) == pytest.approx(float(erlang_c_exact(c, a)), rel=1e-9)


def test_erlang_c_two_servers_unit_load_is_exactly_one_third():
    assert erlang_c_exact(2, 1) == Fraction(1, 3)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3, rel=1e-14)


@given(rho=st.floats(min_value=0.001, max_value=0.999))
def test_erlang_c_single_server_is_rho(rho):
    # M/M/1: the probability of waiting is the utilization.
    assert erlang_c(1, rho) == pytest.approx(rho, rel=1e-12)


@settings(max_examples=200)
@given(c=st.integers(min_value=1, max_value=150), rho=st.floats(min_value=0.01, max_value=0.99))
def test_erlang_c_matches_definition(c, rho):
    a = rho * c
    assert erlang_c(c, a) == pytest.approx(erlang_c_float(c, a), rel=1e-9, abs=1e-300)


def test_erlang_c_saturation_and_empty():
    assert erlang_c(4, 4.0) == 1.0
    assert erlang_c(4, 9.0) == 1.0
    assert erlang_c(4, 0.0) == 0.0


# ----------------------------------------------------------------------------------------------------------------
# M/M/c waiting time
# ----------------------------------------------------------------------------------------------------------------

MMC_CASES = [
    # servers, arrival rate (1/s), service time (s)
    (1, 0.5, 1.0),
    (2, 1.0, 1.0),
    (5, 3.2, 1.0),
    (10, 4.0, 2.0),
    (64, 20.0, 3.0),
]


@pytest.mark.parametrize("c, lam, s", MMC_CASES)
def test_mmc_mean_wait_direct_formula(c, lam, s):
    a = lam * s
    expected = erlang_c_float(c, a) / (c / s - lam)
    assert mmc_mean_wait(c, lam, s) == pytest.approx(expected, rel=1e-10)


def test_mm1_mean_wait_textbook():
    # M/M/1: Wq = rho / (mu - lambda). lambda = 0.5, mu = 1 -> Wq = 1 s.
    assert mmc_mean_wait(1, 0.5, 1.0) == pytest.approx(1.0, rel=1e-12)
    # lambda = 0.9, mu = 1 -> Wq = 0.9 / 0.1 = 9 s.
    assert mmc_mean_wait(1, 0.9, 1.0) == pytest.approx(9.0, rel=1e-10)


@pytest.mark.parametrize("c, lam, s", MMC_CASES)
def test_mmc_wait_second_moment_direct_formula(c, lam, s):
    # W = 0 w.p. 1 - C, else Exp(c mu - lambda): E[W^2] = 2 C / (c mu - lambda)^2.
    r = c / s - lam
    expected = 2 * erlang_c_float(c, lam * s) / r**2
    assert mmc_wait_second_moment(c, lam, s) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("c, lam, s", MMC_CASES)
@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_mmc_wait_quantile_solves_tail_equation(c, lam, s, q):
    cw = erlang_c_float(c, lam * s)
    t = mmc_wait_quantile(c, lam, s, q)
    if cw <= 1 - q:
        # Fewer than a fraction 1-q of arrivals wait at all: the q-quantile of the wait is 0.
        assert t == 0.0
    else:
        expected = math.log(cw / (1 - q)) / (c / s - lam)
        assert t == pytest.approx(expected, rel=1e-10)
        # and P(W > t) = C exp(-(c mu - lambda) t) equals 1 - q there.
        assert cw * math.exp(-(c / s - lam) * t) == pytest.approx(1 - q, rel=1e-9)


def test_mm1_wait_quantile_textbook():
    # M/M/1, rho = 0.8, mu = 1: P(W > t) = 0.8 exp(-0.2 t); the 95th percentile is ln(0.8/0.05)/0.2 = 5 ln 16.
    assert mmc_wait_quantile(1, 0.8, 1.0, 0.95) == pytest.approx(5 * math.log(16), rel=1e-12)


def test_mmc_unstable_is_infinite():
    assert mmc_mean_wait(2, 2.0, 1.0) == math.inf
    assert mmc_wait_quantile(2, 3.0, 1.0, 0.95) == math.inf
    assert mmc_wait_second_moment(2, 2.5, 1.0) == math.inf


@pytest.mark.parametrize("c, s", [(1, 1.0), (4, 2.0), (16, 0.5), (197, 4.84)])
@pytest.mark.parametrize("wait_s, q", [(0.5, 0.95), (1.0, 0.95), (10.0, 0.99)])
def test_max_arrival_for_wait_inverts_quantile(c, s, wait_s, q):
    lam = max_arrival_for_wait(c, s, wait_s, q)
    assert 0 < lam < c / s
    # At the returned rate the quantile is within the target, and it binds: just above, the target is broken.
    assert mmc_wait_quantile(c, lam, s, q) <= wait_s + 1e-9
    assert mmc_wait_quantile(c, lam * (1 + 1e-6), s, q) > wait_s
    # The quantile at the returned rate equals the target (it is continuous and increasing there).
    assert mmc_wait_quantile(c, lam, s, q) == pytest.approx(wait_s, rel=1e-6)


def test_max_arrival_for_wait_mm1_closed_form():
    # M/M/1 with mu = 1: rho exp(-(1 - rho) t) = 1 - q. With t = 5 ln 16, q = 0.95 the root is rho = 0.8
    # (see test_mm1_wait_quantile_textbook).
    assert max_arrival_for_wait(1, 1.0, 5 * math.log(16), 0.95) == pytest.approx(0.8, rel=1e-9)


# ----------------------------------------------------------------------------------------------------------------
# Closed networks: exact_mva
# ----------------------------------------------------------------------------------------------------------------


def single(n):
    return np.ones_like(np.asarray(n, dtype=float))


def servers(c):
    return lambda n: np.minimum(np.asarray(n, dtype=float), c)


def test_exact_mva_jain_example_34_2():
    """R. Jain, *The Art of Computer Systems Performance Analysis* (Wiley 1991), Example 34.2 / Table 34.1:
    timesharing system, CPU S=0.125 s x 16 visits (D=2), disk A S=0.3 s x 10 visits (D=3), disk B S=0.2 s x 5
    visits (D=1), think time Z=4 s. Printed: system throughput and queue lengths per population (3 decimals)."""
    table = {
        # N: (throughput, Q_cpu, Q_diskA, Q_diskB, system response time)
        1: (0.100, 0.200, 0.300, 0.100, 6.000),
        2: (0.175, 0.421, 0.684, 0.193, 7.400),
        3: (0.229, 0.651, 1.158, 0.273, 9.088),
        4: (0.266, 0.878, 1.721, 0.338, 11.051),
        5: (0.290, 1.088, 2.365, 0.388, 13.256),
        17: (0.333, 1.974, 13.195, 0.499, 47.045),
        18: (0.333, 1.981, 14.187, 0.499, 50.032),
        19: (0.333, 1.987, 15.181, 0.500, 53.022),
        20: (0.333, 1.991, 16.177, 0.500, 56.016),
    }
    stations = [Station("cpu", 2.0, single), Station("diskA", 3.0, single), Station("diskB", 1.0, single)]
    for n, (x, q_cpu, q_a, q_b, r_sys) in table.items():
        res = exact_mva(stations, 4.0, n)
        assert res.population == n
        assert res.throughput == pytest.approx(x, abs=6e-4), n
        assert exact_mva(stations, 4.0, 1).throughput == pytest.approx(0.1, rel=1e-9)
        assert res.queue_length == pytest.approx([q_cpu, q_a, q_b], abs=6e-4), n
        assert float(res.residence_s.sum()) == pytest.approx(r_sys, abs=6e-4), n


FIXED_RATE_DEMANDS = st.lists(st.floats(min_value=0.01, max_value=10.0), min_size=1, max_size=4)
THINK_S = st.one_of(st.just(0.0), st.floats(min_value=0.01, max_value=100.0))
"""Fixed-rate single-server networks with a delay, as `fixed_rate_mva` solves them."""


@settings(max_examples=60, deadline=None)
@given(demands=FIXED_RATE_DEMANDS, think=THINK_S, n=st.integers(min_value=1, max_value=80))
def test_exact_mva_matches_fixed_rate_mva_recursion(demands, think, n):
    xs_ref, q_ref, r_ref = fixed_rate_mva(demands, think, n)
    res = exact_mva([Station(f"s{i}", d, single) for i, d in enumerate(demands)], think, n)
    assert res.throughput == pytest.approx(xs_ref[-1], rel=1e-9)
    assert res.queue_length == pytest.approx(q_ref, rel=1e-6, abs=1e-9)
    assert res.residence_s == pytest.approx(r_ref, rel=1e-6, abs=1e-9)


LARGE_CASES = [([0.4, 0.25, 0.1], 600.0, 5000), ([6.0, 20.0, 0.5], 300.0, 5000), ([0.4, 0.25, 0.1], 600.0, 1000)]


@pytest.mark.parametrize("demands, think, n", LARGE_CASES)
def test_exact_mva_large_population_matches_recursion_at_n(demands, think, n):
    # Thousands of tasks, three fixed-rate stations: X(N) and Q_k(N) (what the pipeline reads) must agree with
    # the (numerically stable) fixed-rate recursion.
    xs_ref, q_ref, _ = fixed_rate_mva(demands, think, n)
    res = exact_mva([Station(f"s{i}", d, single) for i, d in enumerate(demands)], think, n)
    assert res.throughput == pytest.approx(xs_ref[-1], rel=1e-9)
    assert res.queue_length == pytest.approx(q_ref, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("demands, think, n", LARGE_CASES)
def test_exact_mva_large_population_throughput_at_smaller_populations(demands, think, n):
    # Each population is its own solve: X(m) for a spread of m up to N must match the recursion.
    xs_ref, _, _ = fixed_rate_mva(demands, think, n)
    for m in (1, 2, 10, n // 7, n // 2, n - 1, n):
        res = exact_mva([Station(f"s{i}", d, single) for i, d in enumerate(demands)], think, m)
        assert res.throughput == pytest.approx(xs_ref[m - 1], rel=1e-8), m


@settings(max_examples=40, deadline=None)
@given(demands=FIXED_RATE_DEMANDS, think=THINK_S, n=st.integers(min_value=1, max_value=60))
def test_closed_network_rates_at_every_population_match_the_recursion(demands, think, n):
    """The flow-equivalent rate function X(m) for every m <= N at once (log-sum-exp convolution, so small
    populations keep their accuracy next to large ones) against the fixed-rate MVA recursion."""
    xs_ref, _, _ = fixed_rate_mva(demands, think, n)
    mu = closed_network_rates([Station(f"s{i}", d, single) for i, d in enumerate(demands)], think, n)
    assert mu[0] == 0.0
    assert mu[1:] == pytest.approx(xs_ref, rel=1e-9)


def test_closed_network_rates_hold_small_populations_beside_thousands():
    """Populations 1..3,000 of a multi-server station and a delay: each entry equals its own exact solve, including
    the small ones a convolution scaled to its maximum would lose."""
    stations = [Station("cpu", 40.0, servers(12))]
    mu = closed_network_rates(stations, 300.0, 3000)
    for m in (1, 2, 5, 30, 400, 2999, 3000):
        assert mu[m] == pytest.approx(exact_mva(stations, 300.0, m).throughput, rel=1e-9), m
    assert mu[3000] == pytest.approx(12 / 40.0, rel=1e-6)  # saturated: c / D


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("n", [10, 100, 1000, 5000])
def test_exact_mva_balanced_network_closed_form(k, n):
    """Balanced network, no think time: K identical single-server stations with demand D. The product form is
    uniform over the C(N+K-1, K-1) states, so X(N) = N / ((N + K - 1) D) and every station holds N / K tasks
    (Lazowska et al., QSP 1984, sec. 5.4, balanced systems). Little's law over the loop: sum Q_k = N."""
    d = 0.7
    res = exact_mva([Station(f"s{i}", d, single) for i in range(k)], 0.0, n)
    assert res.throughput == pytest.approx(n / ((n + k - 1) * d), rel=1e-9)
    assert res.queue_length == pytest.approx([n / k] * k, rel=1e-6)
    assert float(res.queue_length.sum()) == pytest.approx(n, rel=1e-6)
    assert n == pytest.approx(res.throughput * float(res.residence_s.sum()), rel=1e-6)


def gpu_like_rate(l0: float, d: float, b_max: int):
    """Batching station: b tasks finish at b / (L0 + (b-1) d) per second, capped at b_max; as a multiplier of
    the single-task rate 1 / L0 that is alpha(b) = b L0 / (L0 + (b-1) d)."""

    def alpha(n):
        b = np.minimum(np.asarray(n, dtype=float), b_max)
        return b * l0 / (l0 + (b - 1) * d)

    return alpha


@pytest.mark.parametrize(
    "demands, rates, rate_fns, think, population",
    [
        # one 2-server station
        ([1.0], [2], None, 1.5, 5),
        # a 3-server station and a single server
        ([2.0, 0.7], [3, 1], None, 4.0, 6),
        # three stations with 1, 2, 4 servers, no think time would make delay idle: keep a small one
        ([0.5, 1.2, 3.0], [1, 2, 4], None, 0.3, 5),
        # a batching (GPU-like) station and a 2-core tool station
        ([1.0, 0.8], None, [gpu_like_rate(1.0, 0.2, 3), servers(2)], 2.0, 6),
    ],
)
def test_exact_mva_load_dependent_matches_ctmc(demands, rates, rate_fns, think, population):
    fns = rate_fns if rate_fns is not None else [servers(c) for c in rates]
    stations = [Station(f"s{i}", d, f) for i, (d, f) in enumerate(zip(demands, fns))]
    for n in range(1, population + 1):
        x_ref, q_ref = ctmc_closed_cycle(demands, fns, think, n)
        res = exact_mva(stations, think, n)
        assert res.throughput == pytest.approx(x_ref, rel=1e-9), n
        assert res.queue_length == pytest.approx(q_ref, rel=1e-6, abs=1e-9), n


def test_exact_mva_multiserver_population_one_is_unloaded():
    # With one task nothing queues: X(1) = 1 / (Z + sum D) whatever the server counts.
    st_ = [Station("a", 2.0, servers(4)), Station("b", 0.5, servers(1))]
    res = exact_mva(st_, 3.0, 1)
    assert res.throughput == pytest.approx(1 / 5.5, rel=1e-12)
    assert res.residence_s == pytest.approx([2.0, 0.5], rel=1e-6)


def test_exact_mva_littles_law_5000_agents_multiserver():
    # Three multi-server stations, 5,000 agents, think 300 s. Little's law over the whole loop,
    # N = X (Z + sum_k R_k), with R_k = Q_k / X from an independent derivative of log G.
    stations = [
        Station("gpu", 6.0, servers(64)),
        Station("cpu", 20.0, servers(400)),
        Station("mem", 0.5, servers(8)),
    ]
    n, think = 5000, 300.0
    res = exact_mva(stations, think, n)
    x = res.throughput
    assert n == pytest.approx(x * (think + float(res.residence_s.sum())), rel=1e-6)
    # Little for the delay station alone: mean thinking = X Z, so the queue lengths account for the rest.
    assert float(res.queue_length.sum()) + x * think == pytest.approx(n, rel=1e-6)
    # Asymptotic bounds (Lazowska et al. ch. 5 / Muntz-Wong for multi-server): X <= min(c_k / D_k), X <= N / (Z + D).
    x_max = min(64 / 6.0, 400 / 20.0, 8 / 0.5)
    assert x <= x_max * (1 + 1e-12)
    assert x <= n / (think + 26.5)
    # 5,000 agents far exceed the saturation population: the bottleneck is nearly saturated.
    assert x == pytest.approx(x_max, rel=1e-3)
    # Queue lengths are nonnegative and the bottleneck holds the most.
    assert np.all(res.queue_length >= -1e-9)
    assert res.queue_length[0] == max(res.queue_length)


def test_exact_mva_throughput_grows_with_population_5000_agents_multiserver():
    # Same network: X(n) must start at the unloaded 1 / (Z + sum D) and never decrease with n (more tasks never
    # lower a product-form network's throughput with nondecreasing rates).
    stations = [
        Station("gpu", 6.0, servers(64)),
        Station("cpu", 20.0, servers(400)),
        Station("mem", 0.5, servers(8)),
    ]
    pops = [1, 2, 5, 50, 200, 500, 1000, 2000, 3500, 5000]
    xs = [exact_mva(stations, 300.0, m, queue_lengths=False).throughput for m in pops]
    assert np.all(np.isfinite(xs))
    assert xs[0] == pytest.approx(1 / (300.0 + 26.5), rel=1e-9)
    assert np.all(np.diff(xs) >= -1e-9 * np.asarray(xs[1:]))


@settings(max_examples=25, deadline=None)
@given(
    demands=st.lists(st.floats(min_value=0.05, max_value=5.0), min_size=1, max_size=3),
    cs=st.lists(st.integers(min_value=1, max_value=50), min_size=3, max_size=3),
    think=st.floats(min_value=0.0, max_value=200.0),
    n=st.integers(min_value=1, max_value=2000),
)
def test_exact_mva_littles_law_random(demands, cs, think, n):
    stations = [Station(f"s{i}", d, servers(c)) for i, (d, c) in enumerate(zip(demands, cs))]
    res = exact_mva(stations, think, n)
    x = res.throughput
    assert np.isfinite(x) and x > 0
    assert n == pytest.approx(x * (think + float(res.residence_s.sum())), rel=1e-6)
    assert x <= min(c / d for d, c in zip(demands, cs)) * (1 + 1e-9)
    assert x <= n / (think + sum(demands)) * (1 + 1e-9)


# ----------------------------------------------------------------------------------------------------------------
# Birth-death station with Poisson arrivals
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "c, lam, mu",
    [(1, 0.5, 1.0), (1, 0.95, 1.0), (2, 1.0, 1.0), (5, 4.0, 1.0), (10, 8.0, 1.0), (32, 25.0, 0.9)],
)
@pytest.mark.parametrize("cap", ["at_servers", "large"])
def test_birth_death_mean_number_is_mmc_mean_in_system(c, lam, mu, cap):
    rate = lambda n: mu * np.minimum(np.asarray(n, dtype=float), c)  # noqa: E731
    # With the cap at c the geometric tail is exact (the rate is constant beyond c); with a large cap
    # the truncation is negligible.
    k = c if cap == "at_servers" else 20000
    got = birth_death_mean_number(lam, rate, k)
    assert got == pytest.approx(mmc_mean_number_in_system(c, lam, mu), rel=1e-9)


def test_birth_death_mm1_closed_form():
    # M/M/1: L = rho / (1 - rho); rho = 0.75 -> 3.
    assert birth_death_mean_number(0.75, lambda n: np.ones_like(n), 50) == pytest.approx(3.0, rel=1e-12)


def test_birth_death_unstable_and_empty():
    rate = lambda n: np.minimum(np.asarray(n, dtype=float), 2)  # noqa: E731
    assert birth_death_mean_number(2.0, rate, 100) == math.inf
    assert birth_death_mean_number(0.0, rate, 100) == 0.0


# ----------------------------------------------------------------------------------------------------------------
# Closed loop: what an arriving task finds, its wait, and the call-time spread
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("population", [1, 2, 5])
def test_arrival_queue_pmf_is_the_ctmc_marginal_with_one_task_fewer(population):
    """Arrival theorem: a task arriving at a station of a product-form network with N tasks sees the stationary
    distribution of the same network with N - 1 tasks. Oracle: the brute-force CTMC at N - 1."""
    demands, fns, think = [1.0, 0.7], [servers(2), gpu_like_rate(1.0, 0.2, 3)], 1.5
    stations = [Station(f"s{i}", d, f) for i, (d, f) in enumerate(zip(demands, fns))]
    x_n = exact_mva(stations, think, population).throughput
    found = arrival_queue_pmf(stations, think, population, x_n)
    if population == 1:
        want = np.ones((2, 1))  # alone in the loop: it finds nobody
    else:
        _, _, want = ctmc_closed_cycle(demands, fns, think, population - 1, marginals=True)
    for k in range(2):
        assert found[k] == pytest.approx(want[k], rel=1e-6, abs=1e-12), k


def test_multiserver_wait_moments_hand_values():
    # finds 2 tasks at a 2-server station with 4 s calls: waits for 1 completion at rate 2 / 4 -> exponential, mean 2 s
    assert multiserver_wait_moments(np.array([0.0, 0.0, 1.0]), 2, 4.0) == pytest.approx((2.0, 8.0))
    # finds 3: Erlang-2 at rate 1/2 -> mean 4, E[W^2] = k (k + 1) / rate^2 = 6 x 4 = 24
    assert multiserver_wait_moments(np.array([0.0, 0.0, 0.0, 1.0]), 2, 4.0) == pytest.approx((4.0, 24.0))
    # finds fewer than the servers: no wait
    assert multiserver_wait_moments(np.array([0.5, 0.5]), 2, 4.0) == (0.0, 0.0)
    # a mixture: half find 0, half find 2
    assert multiserver_wait_moments(np.array([0.5, 0.0, 0.5]), 2, 4.0) == pytest.approx((1.0, 4.0))


@pytest.mark.parametrize("c, population", [(1, 6), (2, 8), (3, 30)])
def test_arrival_wait_mean_equals_mva_residence(c, population):
    """Two routes to the mean wait at an exponential c-server station agree: (R - D) from the exact solution
    (Little's law on the marginal at N) and the wait of an arriving task (the marginal at N - 1)."""
    d, think = 2.0, 3.0
    stations = [Station("tool", d, servers(c)), Station("other", 0.8, single)]
    res = exact_mva(stations, think, population)
    found = arrival_queue_pmf(stations, think, population, res.throughput)
    m1, m2 = multiserver_wait_moments(found[0], c, d)
    assert m1 == pytest.approx(float(res.residence_s[0]) - d, rel=1e-7, abs=1e-10)
    assert m2 >= m1 * m1  # a variance is never negative


def test_variability_station_at_scale_one_is_the_exponential_network():
    plain = [Station("gpu", 1.0, gpu_like_rate(1.0, 0.2, 8)), Station("tool", 3.0, servers(4))]

    def network(x_hat):
        return [plain[0], variability_station("tool", 3.0, 4.0, 1.0, x_hat)]

    fp = closed_loop_fixed_point(exact_mva, network, 2.0, 40)
    assert fp.x_hat is None and fp.iterations == 0
    assert fp.result.throughput == exact_mva(plain, 2.0, 40).throughput
    assert closed_loop_scale(1.0) == 1.0


@pytest.mark.parametrize("scale", [2.0, 8.0])
@pytest.mark.parametrize("population", [5, 20, 60])
def test_closed_loop_fixed_point_settles_and_costs_throughput(scale, population):
    gpu = Station("gpu", 1.0, gpu_like_rate(1.0, 0.2, 8))

    def network(s):
        return lambda x_hat: [gpu, variability_station("tool", 3.0, 4.0, s, x_hat)]

    exp_x = exact_mva(network(1.0)(None), 2.0, population).throughput
    fp = closed_loop_fixed_point(exact_mva, network(scale), 2.0, population)
    x = fp.result.throughput
    # a fixed point: the stations were scaled at the throughput they give
    assert fp.x_hat == pytest.approx(x, rel=1e-8)
    assert exact_mva(network(scale)(x), 2.0, population).throughput == pytest.approx(x, rel=1e-8)
    # more spread in the call times, more queueing at the same population: never more throughput
    assert x <= exp_x * (1 + 1e-12)
    if scale == 8.0:
        lower = closed_loop_fixed_point(exact_mva, network(2.0), 2.0, population).result.throughput
        assert x <= lower * (1 + 1e-12)
    # Little's law over the loop
    assert population == pytest.approx(x * (2.0 + float(fp.result.residence_s.sum())), rel=1e-6)


def test_closed_loop_fixed_point_keeps_the_capacity():
    """The spread slows the queue, not the servers: with many tasks the station still runs at c / D."""
    gpu = Station("gpu", 1.0, gpu_like_rate(1.0, 0.2, 8))
    fp = closed_loop_fixed_point(exact_mva, lambda x_hat: [gpu, variability_station("tool", 3.0, 4.0, 15.0, x_hat)],
                                 2.0, 3000, queue_lengths=False)
    assert fp.result.throughput == pytest.approx(4.0 / 3.0, rel=1e-2)
    assert fp.result.throughput <= 4.0 / 3.0 * (1 + 1e-12)


@pytest.mark.parametrize("c", [1, 4])
def test_variability_station_queue_is_scale_times_mmc_in_heavy_traffic(c):
    """With Poisson arrivals at rho = 0.98 the station's mean queue is about `scale` times M/M/c's (Allen-Cunneen's
    (1 + SCV) / 2 in heavy traffic, Kingman's limit), which is what the closed loop borrows."""
    scale, rho, s = 4.0, 0.98, 1.0
    lam = rho * c / s
    st_ = variability_station("tool", s, float(c), scale, lam)
    lq = birth_death_mean_number(lam, lambda n: st_.rate(n) / s, 20000) - lam * s
    lq_mmc = mmc_mean_number_in_system(c, lam, 1.0 / s) - lam * s
    assert lq / lq_mmc == pytest.approx(scale, rel=0.05)
