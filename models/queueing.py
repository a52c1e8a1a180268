"""Textbook queueing results used by the pipeline model (pure functions, numpy).

Sources: Erlang C and M/M/c waiting-time distribution (Kleinrock, *Queueing Systems* Vol. 1, 1975, sec. 3.5);
exact solution of closed product-form networks with load-dependent stations (Buzen 1973; Reiser & Lavenberg 1980; Lazowska et al.,
*Quantitative System Performance*, 1984, ch. 20).
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaincc


ERLANG_RECURSION_MAX_SERVERS = 64
"""Up to this many servers Erlang B comes from its recursion (exact, cheapest for few servers); above it from the
Poisson closed form, O(1) instead of O(c) (tool pools have thousands of cores; the two agree to ~1e-11)."""


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability an arrival waits in an M/M/c queue with `servers` servers and offered load a = lambda/mu.

    Erlang B from the stable recursion B(k) = a B(k-1) / (k + a B(k-1)) for few servers, else as the Poisson
    ratio B(c) = P(N = c) / P(N <= c) with N ~ Poisson(a) (log-pmf and the regularized upper incomplete gamma);
    then C = B / (1 - rho (1 - B)). Returns 1.0 at or beyond saturation (a >= c).
    """
    if servers <= 0:
        return 1.0
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    if servers <= ERLANG_RECURSION_MAX_SERVERS:
        b = 1.0
        for k in range(1, servers + 1):
            b = offered_load * b / (k + offered_load * b)
    else:
        cdf = float(gammaincc(servers + 1, offered_load))
        b = math.exp(servers * math.log(offered_load) - offered_load - math.lgamma(servers + 1)) / cdf
    rho = offered_load / servers
    return b / (1.0 - rho * (1.0 - b))


def mmc_wait_quantile(servers: int, arrival_rate: float, service_time: float, q: float) -> float:
    """q-quantile of the waiting time in M/M/c: P(W > t) = C exp(-(c mu - lambda) t). Infinite if unstable."""
    a = arrival_rate * service_time
    r = servers / service_time - arrival_rate
    if servers <= 0 or a >= servers or r <= 0:
        return math.inf
    c = erlang_c(servers, a)
    tail = 1.0 - q
    if c <= tail:
        return 0.0
    return math.log(c / tail) / r


def mmc_mean_wait(servers: int, arrival_rate: float, service_time: float) -> float:
    """Mean wait in queue for M/M/c: C / (c mu - lambda)."""
    a = arrival_rate * service_time
    r = servers / service_time - arrival_rate
    if servers <= 0 or a >= servers or r <= 0:  # r <= 0 with a < c: rounding at the stability edge
        return math.inf
    return erlang_c(servers, a) / r


def mmc_wait_second_moment(servers: int, arrival_rate: float, service_time: float) -> float:
    """E[W^2] for M/M/c: the wait is 0 w.p. 1-C, else exponential with rate c mu - lambda, so 2C/(c mu - lambda)^2."""
    a = arrival_rate * service_time
    r = servers / service_time - arrival_rate
    if servers <= 0 or a >= servers or r <= 0:
        return math.inf
    return 2.0 * erlang_c(servers, a) / (r * r)


INVERSION_CACHE_SIZE = 1024
"""M/M/c tail-wait inversions kept (`max_arrival_for_wait`): one per distinct (servers, call time, wait, quantile),
a few per configuration and a few hundred in an optimizer's tail-wait curves."""


@functools.lru_cache(maxsize=INVERSION_CACHE_SIZE)
def max_arrival_for_wait(servers: int, service_time: float, wait_s: float, q: float) -> float:
    """Largest arrival rate M/M/c can take with its q-quantile wait at most `wait_s` (bisection; wait is increasing in
    load). Kept per arguments (a pure function of them): 80 Erlang C evaluations per call."""
    if servers <= 0:
        return 0.0
    hi = servers / service_time
    lo = 0.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if mmc_wait_quantile(servers, mid, service_time, q) <= wait_s:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Station:
    """A station of a closed network for MVA.

    demand_s: service demand per task at rate multiplier 1 (visits x time per visit when alone).
    rate: alpha(n), the service-rate multiplier with n tasks present (n >= 1); alpha(n) = min(n, c) for c servers.
    """

    name: str
    demand_s: float
    rate: Callable[[np.ndarray], np.ndarray]
    rate_key: Hashable | None = None
    """Optional hashable description of `rate` (equal keys mean equal functions): lets `exact_mva` find a solved
    network in its cache without evaluating the rates."""


@dataclass(frozen=True)
class ClosedResult:
    population: int
    throughput_at: float
    """X(N), tasks per second."""
    queue_length: np.ndarray
    """Mean tasks at each station at population N (think/delay station excluded)."""
    residence_s: np.ndarray
    """Residence time per task at each station at population N (Little: Q / X)."""
    think_s: float

    @property
    def throughput(self) -> float:
        return self.throughput_at


def _log_station(st: Station, n_max: int) -> np.ndarray:
    """log f(n) = n log D - sum_{j<=n} log alpha(j): the station's product-form factor."""
    js = np.arange(1, n_max + 1, dtype=float)
    if st.demand_s <= 0:
        out = np.full(n_max + 1, -np.inf)
        out[0] = 0.0
        return out
    steps = math.log(st.demand_s) - np.log(np.asarray(st.rate(js), dtype=float))
    return np.concatenate(([0.0], np.cumsum(steps)))


def _log_delay(think_s: float, n_max: int) -> np.ndarray:
    js = np.arange(1, n_max + 1, dtype=float)
    if think_s <= 0:
        out = np.full(n_max + 1, -np.inf)
        out[0] = 0.0
        return out
    return np.concatenate(([0.0], np.cumsum(math.log(think_s) - np.log(js))))


def _log_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log of the convolution of exp(a) and exp(b) (first len(a) terms), each side scaled by its maximum.

    The caller tilts every factor by X^n (X near the network's throughput) so each factor peaks near its station's
    queue length; terms that then underflow are negligible for the populations the caller reads."""
    n = len(a)
    ma, mb = np.max(a), np.max(b)
    conv = np.convolve(np.exp(a - ma), np.exp(b - mb))[:n]
    with np.errstate(divide="ignore"):
        return np.log(conv) + ma + mb


MVA_CACHE_SIZE = 64
"""Closed-network solutions kept (keyed by the stations' product-form factors, think time and population), so a
configuration evaluated again (an API client, a report, a benchmark) does not redo the O(K N^2) convolutions; as
many closed-loop fixed points (`closed_loop_fixed_point` with a key)."""
_mva_cache: OrderedDict[Hashable, ClosedResult] = OrderedDict()
_cache_lock = threading.Lock()
"""Guards both caches (the API evaluates in threads)."""


def _cache_get(cache: OrderedDict, key: Hashable):
    with _cache_lock:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
        return hit


def _cache_put(cache: OrderedDict, key: Hashable, value) -> None:
    with _cache_lock:
        cache[key] = value
        while len(cache) > MVA_CACHE_SIZE:
            cache.popitem(last=False)


def _linear(log_f: np.ndarray) -> tuple[np.ndarray, int, float]:
    """exp(log_f - max) without the leading and trailing entries that underflow to exactly 0 (they add nothing to
    any convolution): (values, index of the first kept entry, the max)."""
    m = float(np.max(log_f))
    e = np.exp(log_f - m)
    nz = np.flatnonzero(e)
    return e[nz[0]:nz[-1] + 1], int(nz[0]), m


def _conv_trimmed(a: tuple[np.ndarray, int, float], b: tuple[np.ndarray, int, float], n: int
                  ) -> tuple[np.ndarray, int, float]:
    """Convolution of two trimmed factors, first n entries (index n-1 at most), renormalized to max 1."""
    va, oa, ma = a
    vb, ob, mb = b
    off = oa + ob
    if off >= n:
        return np.zeros(1), 0, -math.inf
    c = np.convolve(va, vb)[:n - off]
    top = float(np.max(c))
    if top <= 0:
        return np.zeros(1), 0, -math.inf
    nz = np.flatnonzero(c)
    return c[nz[0]:nz[-1] + 1] / top, off + int(nz[0]), ma + mb + math.log(top)


def _dense(f: tuple[np.ndarray, int, float], n: int) -> np.ndarray:
    """Trimmed factor as n entries (scaled to max 1; its log scale is f[2])."""
    v, o, _ = f
    out = np.zeros(n)
    k = max(0, min(len(v), n - o))
    out[o:o + k] = v[:k]
    return out


def _last_two(part: tuple[np.ndarray, int, float], f: tuple[np.ndarray, int, float], n_max: int
              ) -> tuple[float, float, float]:
    """Entries N and N-1 of part * f (scaled) and their common log scale: two dot products instead of a full
    convolution when only X(N) = G(N-1) / G(N) is read."""
    a = _dense(part, n_max + 1)
    b = _dense(f, n_max + 1)
    g_n = float(np.dot(a, b[::-1]))
    g_n1 = float(np.dot(a[:-1], b[-2::-1])) if n_max >= 1 else 0.0
    return g_n, g_n1, part[2] + f[2]


def _mva_key(stations: Sequence[Station], base: list[np.ndarray], rates_at_n: list[float], think_s: float,
             population: int, queue_lengths: bool) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((think_s, population, queue_lengths, [s.demand_s for s in stations], rates_at_n)).encode())
    for lf in base:
        h.update(lf.tobytes())
    return h.digest()


def _log_convolve_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log of the convolution of exp(a) and exp(b), first len(a) terms, each by log-sum-exp over its terms (every
    entry accurate whatever its size: the flow-equivalent rates read G(n) at every population, not only at N, where
    `_log_convolve`'s scaling lets the small ones underflow). O(n^2) time, O(n) memory."""
    out = np.full(len(a), -np.inf)
    for n in range(len(a)):
        v = a[:n + 1] + b[n::-1]
        top = np.max(v)
        if np.isfinite(top):
            out[n] = top + math.log(float(np.sum(np.exp(v - top))))
    return out


def closed_network_rates(stations: list[Station], think_s: float, n_max: int) -> np.ndarray:
    """Completions per second of a closed network of n tasks, for every n = 0..n_max: X(n) = G(n-1) / G(n) (a
    flow-equivalent station's rate function, Chandy, Herzog & Woo 1975)."""
    log_g = _log_delay(think_s, n_max)
    for st in stations:
        log_g = _log_convolve_exact(log_g, _log_station(st, n_max))
    mu = np.zeros(n_max + 1)
    with np.errstate(invalid="ignore"):
        mu[1:] = np.exp(log_g[:-1] - log_g[1:])
    return np.nan_to_num(mu, nan=0.0)


def exact_mva(stations: Sequence[Station], think_s: float, population: int, queue_lengths: bool = True) -> ClosedResult:
    """Exact solution of a single-class closed product-form network with load-dependent stations.

    Computed with the convolution algorithm (Buzen 1973; load-dependent form in Lazowska et al. 1984, ch. 20),
    which gives the same numbers as exact MVA but stays numerically stable for thousands of tasks because it works
    with scaled normalizing constants: X(n) = G(n-1)/G(n); P_k(j) = f_k(j) G_-k(N-j) / G(N).
    Little's law N = X (Z + sum_k R_k) holds exactly. Cost O(K^2 N^2) with K small, less in practice: entries of a
    factor that underflow are dropped before convolving, and when only X(N) is read the last station enters by two
    dot products. Results are kept in a small cache keyed by the stations' factors (`MVA_CACHE_SIZE`).
    """
    n_max = int(population)
    n_idx = np.arange(n_max + 1)
    quick_key = None
    if all(s.rate_key is not None for s in stations):
        quick_key = ("keys", tuple((s.demand_s, s.rate_key) for s in stations), think_s, n_max, queue_lengths)
        hit = _cache_get(_mva_cache, quick_key)
        if hit is not None:
            return hit
    base = [_log_station(s, n_max) for s in stations]
    base_delay = _log_delay(think_s, n_max)

    # Tilt by X^n: first with the asymptotic bound, then with the throughput that gives (Buzen's scaling idea).
    rates_at_n = [float(np.asarray(s.rate(np.array([float(n_max)])))[0]) / s.demand_s for s in stations if s.demand_s > 0]
    key = quick_key or _mva_key(stations, base, rates_at_n, think_s, n_max, queue_lengths)
    hit = _cache_get(_mva_cache, key)
    if hit is not None:
        return hit
    # X(N) <= N / (Z + sum D): without it a network with many servers per station starts from a tilt far above its
    # throughput, and (X / tilt)^N underflows to a zero normalizing constant (e.g. three 992-server stations, N=992)
    cycle = think_s + sum(s.demand_s for s in stations)
    x_tilt = min(rates_at_n + [n_max / cycle if cycle > 0 else math.inf])
    if not math.isfinite(x_tilt) or x_tilt <= 0:
        x_tilt = 1.0
    xs_n = math.nan
    for _ in range(2):
        lt = math.log(x_tilt)
        facs = [_linear(lf + lt * n_idx) for lf in base]
        delay = _linear(base_delay + lt * n_idx)
        # every factor but the widest is convolved in (narrowest first); the widest enters by two dot products
        order = sorted(range(len(facs)), key=lambda i: len(facs[i][0]))
        part = delay
        for i in order[:-1]:
            part = _conv_trimmed(part, facs[i], n_max + 1)
        if order:
            g_n, g_n1, _ = _last_two(part, facs[order[-1]], n_max)
        else:
            d = _dense(part, n_max + 1)
            g_n, g_n1 = float(d[-1]), float(d[-2]) if n_max >= 1 else 0.0
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            xs_n = x_tilt * (g_n1 / g_n) if g_n > 0 else math.inf
        if math.isfinite(xs_n) and xs_n > 0:
            x_tilt = float(xs_n)
    ql = np.full(len(stations), np.nan)
    if queue_lengths:
        # Marginal of station k: P(n_k = j) = f_k(j) G_-k(N - j) / G(N), with G_-k the network without k.
        for i in range(len(stations)):
            if stations[i].demand_s <= 0:
                ql[i] = 0.0
                continue
            rest = delay
            for j in sorted((j for j in range(len(facs)) if j != i), key=lambda j: len(facs[j][0])):
                rest = _conv_trimmed(rest, facs[j], n_max + 1)
            p = _dense(facs[i], n_max + 1) * _dense(rest, n_max + 1)[::-1]
            tot = float(np.sum(p))
            if tot > 0 and math.isfinite(tot):
                ql[i] = float(np.sum(n_idx * p) / tot)
            else:
                ql[i] = _queue_length_by_derivative(base, base_delay, i, x_tilt, n_max)
    x = float(xs_n)
    res = ClosedResult(n_max, x, ql, ql / x, think_s)
    _cache_put(_mva_cache, key, res)
    return res


def arrival_queue_pmf(stations: Sequence[Station], think_s: float, population: int, x_tilt: float
                      ) -> list[np.ndarray | None]:
    """Per station, the distribution of the number of tasks an arriving task finds there: by the arrival theorem
    for product-form networks (Lavenberg & Reiser 1980; Sevcik & Mitrani 1981) it is the station's marginal in the
    same network with one task fewer, P_{N-1}(n_k = j) = f_k(j) G_-k(N-1-j) / G(N-1), j = 0..N-1.

    `x_tilt` is a throughput near the network's (e.g. `exact_mva`'s X(N)); the factors are tilted by it as in
    `exact_mva`, which leaves every ratio exact. None for a station without demand or whose marginal underflows.
    """
    n = int(population)
    if n < 1:
        return [None] * len(stations)
    n_idx = np.arange(n + 1)
    lt = math.log(x_tilt) if x_tilt > 0 and math.isfinite(x_tilt) else 0.0
    facs = [_linear(_log_station(s, n) + lt * n_idx) for s in stations]
    delay = _linear(_log_delay(think_s, n) + lt * n_idx)
    out: list[np.ndarray | None] = []
    for i, st in enumerate(stations):
        if st.demand_s <= 0:
            out.append(None)
            continue
        rest = delay
        for j in sorted((j for j in range(len(facs)) if j != i), key=lambda j: len(facs[j][0])):
            rest = _conv_trimmed(rest, facs[j], n + 1)
        # population N - 1: entries 0..N-1 of the station's factor against the rest reversed
        p = _dense(facs[i], n + 1)[:n] * _dense(rest, n + 1)[:n][::-1]
        tot = float(np.sum(p))
        out.append(p / tot if tot > 0 and math.isfinite(tot) else None)
    return out


def multiserver_wait_moments(pmf: np.ndarray, servers: float, service_s: float) -> tuple[float, float]:
    """Mean and second moment of the wait of a task arriving at an exponential multi-server FCFS station that finds
    j tasks there with probability pmf[j]: it waits for k = max(0, j + 1 - servers) completions at rate
    servers / service_s, a Gamma(k, servers / service_s) wait (Erlang for integer k; `servers` may be fractional, as
    the closed loop's C_q / p_q is), so E[W | j] = k s / m and E[W^2 | j] = k (k + 1) (s / m)^2."""
    if servers <= 0:
        return math.inf, math.inf
    k = np.maximum(0.0, np.arange(len(pmf), dtype=float) + 1.0 - servers)
    step = service_s / servers
    return float(np.sum(pmf * k)) * step, float(np.sum(pmf * k * (k + 1.0))) * step * step


def variability_station(name: str, demand_s: float, servers: float, scale: float, x_hat: float | None) -> Station:
    """A multi-server station whose queue carries the spread of its service times, for a closed network.

    An exponential station with `servers` servers (demand D per task) has, above `servers` tasks, product-form factor
    ratio rho = X D / servers per added task: the M/M/c queue, geometric with ratio rho. A G/G/c queue in heavy
    traffic has an exponential queue whose mean is `scale` = (1 + SCV) / 2 times M/M/c's (the Allen-Cunneen factor
    with Poisson arrivals; Kingman's heavy-traffic limit, and the diffusion approximation of closed networks, Reiser
    & Kobayashi 1974, where a station's queue is geometric with ratio exp(-2 (1 - rho) / (rho (Ca^2 + Cs^2)))). Here
    the ratio above `servers` is rho^(1 / scale), the heavy-traffic equivalent of that ratio that reduces to M/M/c
    exactly at scale 1: the completion rate with more than `servers` tasks present is servers x rho^(1 - 1 / scale),
    rho evaluated at the throughput `x_hat` (capped at 1, so the station's capacity is unchanged). Below `servers`
    tasks nothing queues and service is insensitive to its distribution. `x_hat` None, or scale 1: exponential.
    """
    if x_hat is None or abs(scale - 1.0) <= VARIABILITY_SCALE_TOLERANCE or demand_s <= 0:
        return Station(name, demand_s, lambda n, m=servers: np.minimum(n, m), rate_key=("servers", servers))
    rho = min(1.0, x_hat * demand_s / servers)
    if rho <= 0:
        return Station(name, demand_s, lambda n, m=servers: np.minimum(n, m), rate_key=("servers", servers))
    above = servers * rho ** (1.0 - 1.0 / scale)

    def rate(n, m=servers, top=above):
        n = np.asarray(n, dtype=float)
        return np.where(n <= m, np.minimum(n, m), top)

    return Station(name, demand_s, rate, rate_key=("servers_scv", servers, scale, rho))


CLOSED_LOOP_VARIABILITY_WEIGHT = 0.1
"""Share of the Allen-Cunneen excess f - 1 a closed loop's multi-server station carries (`closed_loop_scale`).
The full factor f = (1 + SCV) / 2 is a single-server heavy-traffic result; with many servers a long call holds one
server of many, and with swe-agent's call times (gamma, SCV ~43: most calls short, a few very long) the wait grows
far less than f below saturation. Fitted against the discrete-event simulator in long runs (8 replications x 4,800
tasks) of eight swe-agent configurations at N (and N/2, 2N on two of them): the weight that matches the simulated
throughput lies between 0.03 and 0.13 where it matters (no excess at all: up to 3.1% above the simulator; half
of it, the value before: 3.0-5.4% below at N). With 0.1 those runs' throughput is within -1.4%..+0.6% (-3.1% on
one hybrid configuration) and their p95 at N within -6.3%..+0.2%, and every regime of bench/validate.py meets its throughput and p95 targets (docs/validation.md; the
runs in bench/validation_misses.md item 3)."""
VARIABILITY_SCALE_TOLERANCE = 1e-12
"""Allen-Cunneen scales this close to 1 leave a station exponential (the exact product-form network)."""
FIXED_POINT_ITERATIONS = 30
"""Most solves `closed_loop_fixed_point` makes (it stops earlier once x_hat settles)."""
FIXED_POINT_TOLERANCE = 1e-10
"""Relative change of the throughput at which the fixed point has settled (far below any figure reported)."""


def closed_loop_scale(open_scale: float) -> float:
    """The queue scale a closed loop's multi-server station carries for its call-time spread, from the open model's
    Allen-Cunneen factor f: 1 + CLOSED_LOOP_VARIABILITY_WEIGHT (f - 1)."""
    return 1.0 + CLOSED_LOOP_VARIABILITY_WEIGHT * (open_scale - 1.0)


@dataclass(frozen=True)
class FixedPoint:
    result: ClosedResult
    x_hat: float | None
    """Throughput the stations' variability scaling was evaluated at (None: every station exponential)."""
    iterations: int


_fixed_point_cache: OrderedDict[Hashable, FixedPoint] = OrderedDict()


def closed_loop_fixed_point(solve: Callable, network: Callable[[float | None], Sequence[Station]], think_s: float,
                            population: int, queue_lengths: bool = True, key: Hashable | None = None) -> FixedPoint:
    """Throughput X(N) of a closed network whose stations depend on the throughput they run at (`network(x_hat)`,
    e.g. `variability_station`): the fixed point x_hat = X(N; network(x_hat)).

    `solve` is the product-form solver (`exact_mva`). The map is increasing in x_hat (a busier station drains its
    queue faster, up to its capacity) and X at the exponential network (x_hat None) is its largest value, so the
    iteration starts there and takes secant steps, kept inside the bracket the monotone map gives.

    `key`: a hashable description that determines `network` (and `solve`) entirely; the fixed point is then kept,
    as solved networks are, so a configuration evaluated again (the sandboxes' population search probes several
    populations per evaluation) skips the iteration.
    """
    if key is not None:
        full = (key, think_s, population, queue_lengths)
        hit = _cache_get(_fixed_point_cache, full)
        if hit is not None:
            return hit
        fp = closed_loop_fixed_point(solve, network, think_s, population, queue_lengths)
        _cache_put(_fixed_point_cache, full, fp)
        return fp
    plain = network(None)
    first = solve(plain, think_s, population, queue_lengths=False)
    x0 = first.throughput
    if not (math.isfinite(x0) and x0 > 0) or not any(
            isinstance(s.rate_key, tuple) and s.rate_key[:1] == ("servers_scv",) for s in network(x0)):
        return FixedPoint(solve(plain, think_s, population, queue_lengths), None, 0)
    # g(x) = X(network(x)) - x: g(x0) <= 0 (x0 is X at the exponential network); g(lo) >= 0 at lo = X(network(lo))
    lo, hi = 0.0, x0
    x_prev, g_prev = x0, solve(network(x0), think_s, population, queue_lengths=False).throughput - x0
    x = x0 + g_prev
    it = 1
    while it < FIXED_POINT_ITERATIONS:
        g = solve(network(x), think_s, population, queue_lengths=False).throughput - x
        it += 1
        if g >= 0:
            lo = max(lo, x)
        else:
            hi = min(hi, x)
        if abs(g) <= FIXED_POINT_TOLERANCE * x:
            break
        step = x - g * (x - x_prev) / (g - g_prev) if g != g_prev else x + g
        x_prev, g_prev = x, g
        x = step if lo < step < hi else 0.5 * (lo + hi) if lo > 0 else x + g
    return FixedPoint(solve(network(x), think_s, population, queue_lengths), x, it)


def _queue_length_by_derivative(base: list[np.ndarray], base_delay: np.ndarray, i: int, x_tilt: float,
                                n_max: int) -> float:
    """E[n_i] = D_i d log G / d D_i by a central difference, for a marginal that underflows."""
    n_idx = np.arange(n_max + 1)
    lt = math.log(x_tilt)
    logs = [lf + lt * n_idx for lf in base]
    delay = base_delay + lt * n_idx

    def log_g(parts: list[np.ndarray]) -> np.ndarray:
        total = delay
        for lf in parts:
            total = _log_convolve(total, lf)
        return total

    h = 1e-4
    up = log_g([lf + h * n_idx if j == i else lf for j, lf in enumerate(logs)])[-1]
    dn = log_g([lf - h * n_idx if j == i else lf for j, lf in enumerate(logs)])[-1]
    return float((up - dn) / (2 * h))


_birth_death_cache: OrderedDict[Hashable, float] = OrderedDict()


def birth_death_mean_number(arrival_rate: float, rate: Callable[[np.ndarray], np.ndarray], cap: int,
                            rate_key: Hashable | None = None) -> float:
    """Mean number in a birth-death station with Poisson arrivals and state-dependent service rate mu(n).

    pi(n) proportional to prod_{i=1..n} lambda / mu(i); truncated where the tail mass is negligible or at `cap`
    states. Infinite if the saturated rate does not exceed the arrival rate. With `rate_key` (a hashable
    description of `rate`) the result is cached: the same station at the same load is not solved twice.
    """
    if arrival_rate <= 0:
        return 0.0
    if rate_key is not None:
        key = (arrival_rate, cap, rate_key)
        hit = _cache_get(_birth_death_cache, key)
        if hit is None:
            hit = birth_death_mean_number(arrival_rate, rate, cap)
            _cache_put(_birth_death_cache, key, hit)
        return hit
    n = np.arange(1, cap + 1, dtype=float)
    mu = np.asarray(rate(n), dtype=float)
    if mu[-1] <= arrival_rate:
        return math.inf
    log_terms = np.cumsum(np.log(arrival_rate) - np.log(mu))
    log_terms = np.concatenate(([0.0], log_terms))
    m = log_terms.max()
    w = np.exp(log_terms - m)
    # Geometric tail beyond the cap at the saturated rate.
    ratio = arrival_rate / mu[-1]
    tail_w = w[-1] * ratio / (1.0 - ratio)
    tail_mean = w[-1] * (ratio * (cap + 1) / (1.0 - ratio) + ratio**2 / (1.0 - ratio) ** 2)
    total = w.sum() + tail_w
    mean = (np.arange(cap + 1) * w).sum() + tail_mean
    return float(mean / total)


def clear_caches() -> None:
    """Forget cached closed-network and birth-death solutions (benchmarks time the cold path with this)."""
    with _cache_lock:
        _mva_cache.clear()
        _birth_death_cache.clear()
        _fixed_point_cache.clear()
    max_arrival_for_wait.cache_clear()
