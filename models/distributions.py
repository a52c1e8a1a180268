"""Task-time distribution: quantiles of a mixture of lognormals, vectorized over many mixtures at once.

Each task class's time is a lognormal matched to its mean m and variance v (sigma^2 = log(1 + v/m^2),
mu = log m - sigma^2/2); the mix is the share-weighted mixture. Its q-quantile solves
sum_k w_k Phi((log t - mu_k) / sigma_k) = q. The root lies between the smallest and the largest of the components'
own q-quantiles, so a Newton iteration on log t kept inside that bracket (bisection when a step would leave it)
converges in a handful of steps for every mixture at once (numpy arrays; `scipy.special.ndtr` is the normal cdf
scipy.stats uses). Mixtures with a degenerate component (zero mean or zero variance: a step in the cdf) are solved
by plain bisection on t, the method the evaluator used before, vectorized.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr, ndtri

NEWTON_MAX_STEPS = 100
"""Safety cap on safeguarded Newton steps (each one at least halves the bracket when Newton is not taken)."""
NEWTON_TOLERANCE_LOG = 1e-13
"""Stop when the Newton step in log t is below this (relative change of t), well under the 1e-9 the tests ask."""
BISECTION_STEPS = 100
"""Bisection steps for degenerate mixtures: enough to shrink any bracket to float resolution."""
SCALAR_PATH_MAX_TERMS = 64
"""Up to this many mixture components in all (mixtures x components) the Newton iteration runs on Python floats:
for the handful of quantiles one evaluation asks for, numpy's per-call overhead costs more than the arithmetic."""
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def _lognormal_params(means: np.ndarray, variances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos = means > 0
    safe_m = np.where(pos, means, 1.0)
    s2 = np.where(pos, np.log1p(variances / (safe_m * safe_m)), 0.0)
    with np.errstate(divide="ignore"):
        mu = np.where(pos, np.log(safe_m) - s2 / 2, -np.inf)
    return mu, np.sqrt(s2)


def _mixture_cdf_steps(weights: np.ndarray, mu: np.ndarray, sigma: np.ndarray, t: np.ndarray) -> np.ndarray:
    """cdf of mixtures that may have point masses: zero-mean components at 0, zero-variance ones at exp(mu)."""
    with np.errstate(divide="ignore"):
        lt = np.log(t)[..., None]
    zero = np.isneginf(mu)
    step = (sigma == 0) & ~zero
    safe_sigma = np.where(sigma > 0, sigma, 1.0)
    with np.errstate(invalid="ignore"):
        smooth = ndtr((lt - np.where(zero, 0.0, mu)) / safe_sigma)
    part = np.where(zero, 1.0, np.where(step, (lt >= mu).astype(float), smooth))
    return np.sum(weights * part, axis=-1)


def _bisect(weights: np.ndarray, mu: np.ndarray, sigma: np.ndarray, means: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Bisection on t over [0, hi], hi doubled from 2 max(mean) until the cdf reaches q; returns the upper end."""
    hi = np.max(means, axis=-1) * 2 + 1e-9
    for _ in range(2100):  # doubling from >= 1e-9 passes any finite float in < 2,100 steps
        short = _mixture_cdf_steps(weights, mu, sigma, hi) < q
        if not short.any():
            break
        hi = np.where(short, hi * 2, hi)
    lo = np.zeros_like(hi)
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        up = (mid > 0) & (_mixture_cdf_steps(weights, mu, sigma, mid) >= q)
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    return hi


def lognormal_mixture_quantiles(weights, means, variances, q) -> np.ndarray:
    """q-quantiles of share-weighted lognormal mixtures.

    weights, means, variances broadcast to (P, K) (P mixtures of K components; means > 0 and variances > 0 for the
    fast path, anything >= 0 allowed); q broadcasts to (P,). Returns P quantiles (seconds)."""
    if np.ndim(means) == 1 and np.ndim(q) <= 1 and np.size(means) * np.size(q) <= SCALAR_PATH_MAX_TERMS:
        small = _small(weights, means, variances, q)
        if small is not None:
            return small
    means = np.asarray(means, dtype=float)
    variances = np.asarray(variances, dtype=float)
    weights = np.asarray(weights, dtype=float)
    shape = np.broadcast_shapes(weights.shape, means.shape, variances.shape, np.shape(q) + (1,))
    w = np.broadcast_to(weights, shape)
    m = np.broadcast_to(means, shape)
    v = np.broadcast_to(variances, shape)
    qq = np.broadcast_to(np.asarray(q, dtype=float), shape[:-1])
    mu, sigma = _lognormal_params(m, v)
    regular = np.all((m > 0) & (sigma > 0), axis=-1)
    out = np.empty(shape[:-1])
    if not regular.all():
        irr = ~regular
        out[irr] = _bisect(w[irr], mu[irr], sigma[irr], m[irr], qq[irr])
    if regular.any():
        if regular.sum() * shape[-1] <= SCALAR_PATH_MAX_TERMS:
            for i in np.flatnonzero(regular.ravel()):
                idx = np.unravel_index(i, regular.shape)
                out[idx] = _newton_scalar(w[idx].tolist(), mu[idx].tolist(), sigma[idx].tolist(), float(qq[idx]))
        else:
            out[regular] = _newton(w[regular], mu[regular], sigma[regular], qq[regular])
    return out


def _small(weights, means, variances, q) -> np.ndarray | None:
    """One smooth mixture, a few quantiles, on Python floats; None when a component is degenerate."""
    ws = [float(x) for x in np.broadcast_to(weights, np.shape(means))]
    mu, sigma = [], []
    for m, v in zip(means, variances):
        m, v = float(m), float(v)
        if not m > 0:
            return None
        s2 = math.log1p(v / (m * m))
        if not s2 > 0:
            return None
        mu.append(math.log(m) - s2 / 2)
        sigma.append(math.sqrt(s2))
    qs = [float(x) for x in np.atleast_1d(q)]
    out = np.array([_newton_scalar(ws, mu, sigma, x) for x in qs])
    return out if np.ndim(q) == 1 else out.reshape(())


def _newton_scalar(w: list[float], mu: list[float], sigma: list[float], q: float) -> float:
    """`_newton` for one mixture on Python floats (same steps; the normal cdf as erfc, as scipy's ndtr)."""
    zq = float(ndtri(q))
    own = [m + s * zq for m, s in zip(mu, sigma)]
    lo, hi = min(own), max(own)
    u = min(max(sum(wk * ok for wk, ok in zip(w, own)), lo), hi)
    terms = list(zip(w, mu, [1.0 / s for s in sigma]))
    dx_old = hi - lo
    for _ in range(NEWTON_MAX_STEPS):
        f = -q
        df = 0.0
        for wk, mk, ik in terms:
            z = (u - mk) * ik
            f += wk * 0.5 * math.erfc(-z * _INV_SQRT_2)
            df += wk * math.exp(-0.5 * z * z) * ik
        df *= _INV_SQRT_2PI
        if f == 0:
            return math.exp(u)
        if f < 0:
            lo = u
        else:
            hi = u
        step = f / df if df > 0 else math.inf
        nxt = u - step
        # Newton when it stays in the bracket and shrinks fast enough (|f| at least halves), else bisect
        # (Numerical Recipes' rtsafe rule; a steep component can make plain Newton cycle).
        newton = lo <= nxt <= hi and abs(2.0 * f) <= abs(dx_old * df)
        if not newton:
            nxt = 0.5 * (lo + hi)
        if (newton and abs(step) <= NEWTON_TOLERANCE_LOG) or hi - lo <= NEWTON_TOLERANCE_LOG:
            return math.exp(nxt if newton else u)
        dx_old = abs(nxt - u)
        u = nxt
    return math.exp(u)


def _newton(w: np.ndarray, mu: np.ndarray, sigma: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Safeguarded Newton on u = log t for smooth mixtures (every component has sigma > 0), all rows at once."""
    own = mu + sigma * ndtri(q)[..., None]  # each component's q-quantile in log t
    lo = np.min(own, axis=-1)
    hi = np.max(own, axis=-1)
    u = np.clip(np.sum(w * own, axis=-1), lo, hi)
    inv_sigma = 1.0 / sigma
    done = np.zeros(u.shape, dtype=bool)
    dx_old = hi - lo
    for _ in range(NEWTON_MAX_STEPS):
        z = (u[..., None] - mu) * inv_sigma
        f = np.sum(w * ndtr(z), axis=-1) - q
        df = np.sum(w * np.exp(-0.5 * z * z) * inv_sigma, axis=-1) * _INV_SQRT_2PI
        below = f < 0
        lo = np.where(below, u, lo)
        hi = np.where(below, hi, u)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            step = f / df
        nxt = u - step
        newton = (nxt >= lo) & (nxt <= hi) & (np.abs(2.0 * f) <= np.abs(dx_old * df))
        nxt = np.where(newton, nxt, 0.5 * (lo + hi))
        finished = (newton & (np.abs(step) <= NEWTON_TOLERANCE_LOG)) | (f == 0) | (hi - lo <= NEWTON_TOLERANCE_LOG)
        keep = done | (finished & ~newton) | (f == 0)
        dx_old = np.where(done, dx_old, np.abs(nxt - u))
        u = np.where(keep, u, nxt)
        done = done | finished
        if done.all():
            break
    return np.exp(u)
