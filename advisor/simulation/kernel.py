"""The simulator's run loop compiled (numba): the engine of `des._Run`, event for event and draw for draw.

Why compiled: after the Python run loop was made lean (des.py's docstring, Engine), one replication of the hybrid
example still takes about 2.4 million events (three per agent turn: the model call's completion, the tool call's
end, which is an arrival at the I/O station, and the next model call's arrival), each an arrival at a queueing
station that must be taken in time order; what was left was Python's work per event (about 2.5-5 us). Events cannot
be merged without changing the figures, so the same loop runs here as machine code (bench/bench_sim.py measures
it).

It is the same engine, not an approximation of it: the same state (the GPU pool's replicas with their virtual-time
heaps, the FIFO slot stations' heaps of free times, the sandbox stores' FIFO queues, a task calendar ordered by
(time, event id)), the same event ids for ties (SimPy's order: time, then the id drawn when the event was filed),
the same random draws in the same order from the same `numpy.random.Generator` (numba's scalar Generator methods
give numpy's streams, and numpy's vector draws are those scalar draws in order; the buffers of 4,096 draws are
refilled at the same points), the same float arithmetic in the same order. For a seed the figures are those of
`des._Run`, bit for bit; tests/test_sim_kernel.py checks it on models with ties, sandbox waits, several SKUs, open
and closed loops. `des._Run` stays the engine for runs with a trace recorder or comonotone stage counts, and
wherever numba cannot be imported.

The state lives in numpy arrays that advisor/simulation/compiled.py builds from a `des._Run` and reads back; rows
of a 2-D array hold the fields of one kind of thing (row constants below), so that each function takes a few
arrays (numba's compile time grows with the size of the tuples it is given). The loop runs until a given time, for
a chunk of events (so that Python can check the wall clock and cancellation between chunks), or until the task
table or the measurement tables need room (Python grows them and calls again). Compiled without reference counting
(`_nrt=False`): nothing is allocated inside, every array is owned by the Python side, and the counting was most of
the time per event.
"""

from __future__ import annotations

import numpy as np
from numba import njit

BLOCK = 4096
"""Draws per refill of a buffer (as des._Draws)."""

GPU, CPU, DELAY, IO = 0, 1, 2, 3

# F (float scalars)
F_NOW, F_ARMED, F_W0, F_W1, F_GPU_TIME, F_ARR_MEAN = range(6)
N_F = 6
# I (int scalars)
(I_EID, I_ARMED_EID, I_COMPLETIONS, I_OUTSTANDING, I_GPU_CALLS, I_CLOSED, I_FREE_TOP, I_CAL_N, I_EV_N, I_PW_HEAD,
 I_PW_N, I_SINGLE, I_UBUF_N, I_EBUF_N, I_NSKU, I_NTT, I_NW, I_STACK_N) = range(18)
N_I = 18
# CI / CF (per class)
C_ST0, C_NST, C_BLK0, C_NBLK, C_MSTORE, C_DSTORE = range(6)
C_MEM, C_DISK = range(2)
# BI (per block of stages: first global stage, length)
B_S0, B_LEN = range(2)
# SI / SF (per global stage)
SI_KIND, SI_STA, SI_GBUF, SI_BUFN = range(4)
SF_PAR, SF_COUNT, SF_CCV, SF_MEAN, SF_CV, SF_DK = range(6)
# TF (per slot station)
T_AREA_C, T_AREA_S, T_WSUM = range(3)
# OI (per sandbox store)
O_KIND, O_HEAD, O_N = range(3)
# RF / RI (per GPU replica)
R_L0, R_D, R_SPEED, R_V, R_LAST, R_AN, R_AW, R_AE, R_NT = range(9)
R_SKU, R_CAP, R_N, R_SEQ, R_HN = range(5)
# KI (per SKU: first replica, replicas)
K_R0, K_NR = range(2)
# PW (the GPU pool's FIFO ring: stage, task)
P_G, P_TASK = range(2)
# XF / XI (per task row)
X_TARR, X_TGPU = range(2)
X_CLS, X_MEAS, X_PHASE, X_B, X_T, X_J, X_EID = range(7)
# CAL (task calendar: event id, task) and EV (sim calendar: event id, 2 x datum + kind)
CAL_E, CAL_X = range(2)
EV_E, EV_X = range(2)
# sim-calendar event kinds (SimPy's calendar in des._Run: a closed-loop agent's start, of class datum; the open
# arrival stream)
EV_START, EV_ARRIVAL = 0, 1
# work stack (des._Run's nested calls after a task's end, kept in order): kind, datum
W_ADMIT, W_ARRIVE = 0, 1
# STG (per global stage: time, wait); CLC (per class: completions in the window, measured tasks)
G_TIME, G_WAIT = range(2)
L_COMP, L_MEAS = range(2)

STATUS_STOP, STATUS_CHUNK, STATUS_GROW = 0, 1, 2

STATE_FIELDS = (
    "F", "I", "rng", "DB", "CI", "CF", "cum", "BI", "SI", "SF", "st_rel", "sbuf", "gbuf", "gbuf_n", "gbuf_k",
    "sta_free", "sta_n", "TF", "sto_level", "OI", "sto_q", "RF", "RI", "rh_tag", "rh_seq", "rh_task", "KI", "pw_x",
    "PW", "XF", "XI", "tk_cnt", "tk_bmax", "free_stack", "cal_t", "CAL", "ev_t", "EV", "stack", "done", "adm", "STG",
    "CLC", "task_times", "task_class", "waits_v", "waits_s")
"""The state tuple's fields, in order (advisor/simulation/compiled.py builds it). DB holds the uniform (row 0) and
exponential (row 1) draw buffers."""

jit = njit(cache=True, _nrt=False)


# ------------------------------------------------------------------------------------------------------------ heaps
@njit(cache=True, inline="always", _nrt=False)
def _less(t1, e1, t2, e2):
    return t1 < t2 or (t1 == t2 and e1 < e2)


@jit
def _heap_push(ht, he, hx, n, t, e, x):
    """Push (t, e) with payload x on a heap of n entries ordered by (t, e); returns the new size."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if _less(t, e, ht[p], he[p]):
            ht[i] = ht[p]
            he[i] = he[p]
            hx[i] = hx[p]
            i = p
        else:
            break
    ht[i] = t
    he[i] = e
    hx[i] = x
    return n + 1


@jit
def _heap_pop(ht, he, hx, n):
    """Remove the head of a heap of n entries; returns the new size."""
    n -= 1
    if n == 0:
        return 0
    t, e, x = ht[n], he[n], hx[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _less(ht[c + 1], he[c + 1], ht[c], he[c]):
            c += 1
        if _less(ht[c], he[c], t, e):
            ht[i] = ht[c]
            he[i] = he[c]
            hx[i] = hx[c]
            i = c
        else:
            break
    ht[i] = t
    he[i] = e
    hx[i] = x
    return n


@jit
def _free_replace(h, n, t):
    """heapq.heapreplace on a heap of n floats (a slot station's free times): only the multiset matters."""
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and h[c + 1] < h[c]:
            c += 1
        if h[c] < t:
            h[i] = h[c]
            i = c
        else:
            break
    h[i] = t


# ------------------------------------------------------------------------------------------------------------ draws
@jit
def _uniform(rng, DB, I):
    n = I[I_UBUF_N]
    if n == 0:
        for i in range(BLOCK):  # numpy's rng.random(BLOCK), draw for draw
            DB[0, i] = rng.random()
        n = BLOCK
    n -= 1
    I[I_UBUF_N] = n
    return DB[0, n]


@jit
def _exponential(rng, DB, I, mean):
    n = I[I_EBUF_N]
    if n == 0:
        for i in range(BLOCK):
            DB[1, i] = rng.standard_exponential()
        n = BLOCK
    n -= 1
    I[I_EBUF_N] = n
    return DB[1, n] * mean


@jit
def _stage_draw(rng, g, sbuf, SI, SF):
    """A stage occurrence's draw from its own buffer (des._Run._refill, des._Draws.block_of)."""
    n = SI[SI_BUFN, g]
    if n == 0:
        if SF[SF_CV, g] <= 0:
            for i in range(BLOCK):
                sbuf[g, i] = SF[SF_MEAN, g]
        else:
            k = SF[SF_DK, g]
            scale = SF[SF_MEAN, g] / k
            for i in range(BLOCK):
                sbuf[g, i] = rng.standard_gamma(k) * scale
        n = BLOCK
    n -= 1
    SI[SI_BUFN, g] = n
    return sbuf[g, n]


@jit
def _pick(u, cum):
    """bisect.bisect_right(cum, u)."""
    i = 0
    m = cum.shape[0]
    while i < m and cum[i] <= u:
        i += 1
    return i


# ---------------------------------------------------------------------------------------------------- the GPU pool
@jit
def _advance(j, now, RF, RI):
    """des._Replica.advance."""
    dt = now - RF[R_LAST, j]
    if dt > 0:
        n = RI[R_N, j]
        if n:
            r = RF[R_SPEED, j] / (RF[R_L0, j] + (n - 1) * RF[R_D, j])
            RF[R_V, j] += dt * r
            RF[R_AN, j] += dt * n
            RF[R_AW, j] += dt * n * r
        else:
            RF[R_AE, j] += dt
        RF[R_LAST, j] = now


@jit
def _fire(now, F, I, st_rel, RF, RI, rh_tag, rh_seq, rh_task, pw_x, PW, done, adm):
    """des._GpuPool.fire: complete the calls due at `now`, give freed room to waiting calls, set the next
    completion; the tasks whose calls completed are written to `done`, in order; returns how many."""
    inf = np.inf
    F[F_ARMED] = inf
    R = RF.shape[1]
    due = now + 1e-9 * (1.0 + now)
    first = inf
    for j in range(R):
        if RF[R_NT, j] < first:
            first = RF[R_NT, j]
    if first > due:  # early (an arrival slowed the replica it was set for): nothing completes
        F[F_ARMED] = first if first > now else now
        I[I_ARMED_EID] = I[I_EID]
        I[I_EID] += 1
        return 0
    nd = 0
    for j in range(R):  # every replica due, in index order (as they take waiting calls)
        if RF[R_NT, j] <= due:
            RF[R_NT, j] = inf
            adm[nd] = j
            nd += 1
    rest = inf
    for j in range(R):
        if RF[R_NT, j] < rest:
            rest = RF[R_NT, j]
    ndone = 0
    ring = pw_x.shape[0]
    for q in range(nd):
        j = adm[q]
        _advance(j, now, RF, RI)
        n = RI[R_N, j]
        v = RF[R_V, j]
        lim = v + 1e-9 * (1.0 + abs(v))
        hn = RI[R_HN, j]
        tags, seqs, tasks = rh_tag[j], rh_seq[j], rh_task[j]
        while hn > 0 and tags[0] <= lim:
            done[ndone] = tasks[0]
            ndone += 1
            hn = _heap_pop(tags, seqs, tasks, hn)
            n -= 1
        cap = RI[R_CAP, j]
        while I[I_PW_N] > 0 and n < cap:
            h = I[I_PW_HEAD]
            g, x, task = PW[P_G, h], pw_x[h], PW[P_TASK, h]
            I[I_PW_HEAD] = (h + 1) % ring
            I[I_PW_N] -= 1
            n += 1
            RI[R_SEQ, j] += 1
            hn = _heap_push(tags, seqs, tasks, hn, v + st_rel[g, RI[R_SKU, j]] * x, RI[R_SEQ, j], task)
        RI[R_N, j] = n
        RI[R_HN, j] = hn
        if hn > 0:
            dt = (tags[0] - v) * (RF[R_L0, j] + (n - 1) * RF[R_D, j]) / RF[R_SPEED, j]
            t = now + (dt if dt > 0.0 else 0.0)
        else:
            t = inf
        RF[R_NT, j] = t
        if t < rest:
            rest = t
    if rest < inf:
        F[F_ARMED] = rest if rest > now else now
        I[I_ARMED_EID] = I[I_EID]
        I[I_EID] += 1
    return ndone


@jit
def _submit(task, g, x, now, F, I, st_rel, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW):
    """The GPU pool's submit (des._Run._run_to): the least-loaded replica of the SKU where the call progresses
    fastest now, or the pool's FIFO when every replica is at its batch limit."""
    best = -1
    if I[I_SINGLE]:
        r0 = KI[K_R0, 0]
        m = RI[R_N, r0]
        best = r0
        for j in range(r0 + 1, r0 + KI[K_NR, 0]):
            if RI[R_N, j] < m:
                m = RI[R_N, j]
                best = j
        if m >= RI[R_CAP, r0]:
            best = -1
    else:
        best_t = np.inf
        for k in range(I[I_NSKU]):
            r0 = KI[K_R0, k]
            m = RI[R_N, r0]
            mj = r0
            for j in range(r0 + 1, r0 + KI[K_NR, k]):
                if RI[R_N, j] < m:
                    m = RI[R_N, j]
                    mj = j
            if m < RI[R_CAP, r0]:
                tk = (RF[R_L0, r0] + m * RF[R_D, r0]) / RF[R_SPEED, r0]
                if tk < best_t:
                    best_t = tk
                    best = mj
    if best < 0:
        h = (I[I_PW_HEAD] + I[I_PW_N]) % pw_x.shape[0]
        PW[P_G, h], pw_x[h], PW[P_TASK, h] = g, x, task
        I[I_PW_N] += 1
        return
    j = best
    _advance(j, now, RF, RI)
    n = RI[R_N, j] + 1
    RI[R_N, j] = n
    RI[R_SEQ, j] += 1
    v = RF[R_V, j]
    tags = rh_tag[j]
    RI[R_HN, j] = _heap_push(tags, rh_seq[j], rh_task[j], RI[R_HN, j], v + st_rel[g, RI[R_SKU, j]] * x,
                             RI[R_SEQ, j], task)
    dt = (tags[0] - v) * (RF[R_L0, j] + (n - 1) * RF[R_D, j]) / RF[R_SPEED, j]
    tk = now + (dt if dt > 0.0 else 0.0)
    RF[R_NT, j] = tk
    if tk < F[F_ARMED]:
        F[F_ARMED] = tk
        I[I_ARMED_EID] = I[I_EID]
        I[I_EID] += 1


# -------------------------------------------------------------------------------------------------- a task's life
@jit
def _seek(task, CI, BI, XI, tk_cnt, tk_bmax):
    """Move the task's position (block, turn, member) to the first stage that runs at or after it: a block runs
    turn by turn, member i in turn t when its count exceeds t (the sequence des._Run._admit builds). Returns the
    global stage, or -1 at the task's end."""
    c = XI[X_CLS, task]
    b0 = CI[C_BLK0, c]
    bend = b0 + CI[C_NBLK, c]
    s0c = CI[C_ST0, c]
    b, t, j = XI[X_B, task], XI[X_T, task], XI[X_J, task]
    while b < bend:
        if j >= BI[B_LEN, b]:
            j = 0
            t += 1
        if t >= tk_bmax[task, b - b0]:
            b += 1
            t = 0
            j = 0
            continue
        g = BI[B_S0, b] + j
        if tk_cnt[task, g - s0c] > t:
            XI[X_B, task], XI[X_T, task], XI[X_J, task] = b, t, j
            return g
        j += 1
    XI[X_B, task], XI[X_T, task], XI[X_J, task] = b, 0, 0
    return -1


@jit
def _push_work(stack, I, kind, x):
    top = I[I_STACK_N]
    if top >= stack.shape[1]:
        raise RuntimeError("simulation kernel: work stack full")
    stack[0, top] = kind
    stack[1, top] = x
    I[I_STACK_N] = top + 1


@jit
def _finish(task, now, F, I, CI, CF, sto_level, OI, sto_q, XF, XI, free_stack, stack, adm, CLC, task_times,
            task_class):
    """des._Run._finish: give back the sandbox, count the task, and put the tasks that now fit and (closed loop)
    the agent's next task on the work stack, to run in des._Run's order."""
    c = XI[X_CLS, task]
    na = 0
    ring = sto_q.shape[1]
    for which in range(2):
        k = CI[C_MSTORE, c] if which == 0 else CI[C_DSTORE, c]
        if k < 0:
            continue
        row = C_MEM if which == 0 else C_DISK
        level = sto_level[k] + CF[row, c]
        while OI[O_N, k] > 0:
            h = OI[O_HEAD, k]
            w = sto_q[k, h]
            a = CF[row, XI[X_CLS, w]]
            if level >= a - 1e-9:
                level -= a
                OI[O_HEAD, k] = (h + 1) % ring
                OI[O_N, k] -= 1
                adm[na] = w
                na += 1
            else:
                break
        sto_level[k] = level
    if F[F_W0] <= now < F[F_W1]:
        I[I_COMPLETIONS] += 1
        CLC[L_COMP, c] += 1
    if XI[X_MEAS, task]:
        I[I_OUTSTANDING] -= 1
        q = I[I_NTT]
        if q >= task_times.shape[0]:
            raise RuntimeError("simulation kernel: task-time table full")
        task_times[q] = now - XF[X_TARR, task]
        task_class[q] = c
        I[I_NTT] = q + 1
        CLC[L_MEAS, c] += 1
    free_stack[I[I_FREE_TOP]] = task
    I[I_FREE_TOP] += 1
    if I[I_CLOSED]:
        _push_work(stack, I, W_ARRIVE, -1)
    for q in range(na - 1, -1, -1):
        _push_work(stack, I, W_ADMIT, adm[q])


@jit
def _run_task(task, now, F, I, rng, CI, CF, BI, SI, SF, st_rel, sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q, RF, RI,
              rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, stack, adm, STG,
              CLC, task_times, task_class, waits_v, waits_s):
    """A task's stages from where it is, at `now` (des._Run._run_to's inner loop): delays add up, a slot station
    places the call at once (Kiefer-Wolfowitz), a model call goes to the GPU pool; the task goes on the calendar at
    its next station arrival (or its end) when that is later than now, or finishes now."""
    measured = XI[X_MEAS, task]
    w0, w1 = F[F_W0], F[F_W1]
    t = now
    in_pool = False
    g = _seek(task, CI, BI, XI, tk_cnt, tk_bmax)
    while g >= 0:
        kind = SI[SI_KIND, g]
        if kind != DELAY and t > now:
            break
        x = _stage_draw(rng, g, sbuf, SI, SF)
        if kind == DELAY:
            if measured:
                STG[G_TIME, g] += x
            t += x
        elif kind == GPU:
            XF[X_TGPU, task] = now
            _submit(task, g, x, now, F, I, st_rel, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW)
            in_pool = True
            break
        else:  # placed on arrival: the call starts when the earliest slot frees, or now
            s = SI[SI_STA, g]
            free = sta_free[s]
            st = free[0]
            if st < now:
                st = now
            t = st + x
            _free_replace(free, sta_n[s], t)
            if t > w0 and st < w1:  # busy time, clipped to the window
                held = (t if t < w1 else w1) - (st if st > w0 else w0)
                TF[T_AREA_S, s] += held
                TF[T_AREA_C, s] += held * SF[SF_PAR, g]
            if measured:
                w = st - now
                STG[G_WAIT, g] += w
                STG[G_TIME, g] += t - now
                TF[T_WSUM, s] += w
                q = I[I_NW]
                if q >= waits_v.shape[0]:
                    raise RuntimeError("simulation kernel: wait table full")
                waits_v[q] = w
                waits_s[q] = s
                I[I_NW] = q + 1
        XI[X_J, task] += 1
        g = _seek(task, CI, BI, XI, tk_cnt, tk_bmax)
    if t > now:  # on the calendar at its next station arrival (or its end)
        e = I[I_EID]
        I[I_EID] += 1
        XI[X_EID, task] = e
        I[I_CAL_N] = _heap_push(cal_t, CAL[CAL_E], CAL[CAL_X], I[I_CAL_N], t, e, task)
    elif not in_pool and g < 0:
        _finish(task, now, F, I, CI, CF, sto_level, OI, sto_q, XF, XI, free_stack, stack, adm, CLC, task_times,
                task_class)


@jit
def _work(kind, x, now, F, I, rng, CI, CF, BI, SI, SF, st_rel, sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q, RF, RI,
          rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, stack, adm, STG, CLC,
          task_times, task_class, waits_v, waits_s, DB, gbuf, gbuf_n, gbuf_k, cum):
    """A task arrives (W_ARRIVE: of class x, or of a class picked by share when x < 0; des._Run._arrive) or is
    admitted (W_ADMIT: task x; des._Run._admit: its sandbox memory, then its disk, waiting FIFO for each, then its
    stage counts, then it runs), and then the work stack's items (tasks admitted after a task's end, an agent's
    next task) in des._Run's order, last pushed first."""
    ring = sto_q.shape[1]
    while True:
        if kind == W_ARRIVE:
            c = x
            if c < 0:
                c = _pick(_uniform(rng, DB, I), cum)
            if I[I_FREE_TOP] == 0:
                raise RuntimeError("simulation kernel: task table full")
            I[I_FREE_TOP] -= 1
            task = free_stack[I[I_FREE_TOP]]
            XI[X_CLS, task] = c
            XF[X_TARR, task] = now
            m = F[F_W0] <= now < F[F_W1]
            XI[X_MEAS, task] = 1 if m else 0
            if m:
                I[I_OUTSTANDING] += 1
            XI[X_PHASE, task] = 0
        else:
            task = x
        c = XI[X_CLS, task]
        admitted = True
        for phase in range(2):
            if admitted and XI[X_PHASE, task] == phase:
                XI[X_PHASE, task] = phase + 1
                k = CI[C_MSTORE, c] if phase == 0 else CI[C_DSTORE, c]
                if k >= 0:
                    a = CF[C_MEM if phase == 0 else C_DISK, c]
                    if OI[O_N, k] == 0 and sto_level[k] >= a - 1e-9:
                        sto_level[k] -= a
                    else:
                        sto_q[k, (OI[O_HEAD, k] + OI[O_N, k]) % ring] = task
                        OI[O_N, k] += 1
                        admitted = False
        if admitted:
            s0 = CI[C_ST0, c]
            for i in range(CI[C_NST, c]):  # des._Run._count: gamma count (buffered by shape), stochastic rounding
                g = s0 + i
                if SF[SF_CCV, g] <= 0:
                    y = SF[SF_COUNT, g]
                else:
                    kb = SI[SI_GBUF, g]
                    k = gbuf_k[kb]
                    n = gbuf_n[kb]
                    if n == 0:
                        for q in range(BLOCK):
                            gbuf[kb, q] = rng.standard_gamma(k)
                        n = BLOCK
                    n -= 1
                    gbuf_n[kb] = n
                    y = gbuf[kb, n] * SF[SF_COUNT, g] / k
                n = int(y)
                if _uniform(rng, DB, I) < y - n:
                    n += 1
                tk_cnt[task, i] = n
            b0 = CI[C_BLK0, c]
            for b in range(b0, b0 + CI[C_NBLK, c]):
                m = 0
                for i in range(BI[B_S0, b] - s0, BI[B_S0, b] - s0 + BI[B_LEN, b]):
                    if tk_cnt[task, i] > m:
                        m = tk_cnt[task, i]
                tk_bmax[task, b - b0] = m
            XI[X_B, task], XI[X_T, task], XI[X_J, task] = b0, 0, 0
            _run_task(task, now, F, I, rng, CI, CF, BI, SI, SF, st_rel, sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q,
                      RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL,
                      stack, adm, STG, CLC, task_times, task_class, waits_v, waits_s)
        if I[I_STACK_N] == 0:
            return
        top = I[I_STACK_N] - 1
        I[I_STACK_N] = top
        kind, x = stack[0, top], stack[1, top]


# ------------------------------------------------------------------------------------------------------ entry points
@jit
def start_closed(agents, cum0, ut, S):
    """A closed loop's start (des._Run._start_closed): each agent's first task is of the class `cum0` picks and
    starts at a uniform time within its class's unloaded task time `ut` (a sim-calendar event, or now if 0)."""
    (F, I, rng, DB, CI, CF, cum, BI, SI, SF, st_rel, sbuf, gbuf, gbuf_n, gbuf_k, sta_free, sta_n, TF, sto_level, OI,
     sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, ev_t, EV,
     stack, done, adm, STG, CLC, task_times, task_class, waits_v, waits_s) = S
    for _ in range(agents):
        c = _pick(_uniform(rng, DB, I), cum0)
        delay = _uniform(rng, DB, I) * ut[c]
        if delay > 0:
            e = I[I_EID]
            I[I_EID] += 1
            I[I_EV_N] = _heap_push(ev_t, EV[EV_E], EV[EV_X], I[I_EV_N], F[F_NOW] + delay, e, 2 * c + EV_START)
        else:
            _push_work(stack, I, W_ARRIVE, c)
            if I[I_STACK_N] > 0:  # the work stack's items (tasks admitted after a task's end, an agent's next task)
                I[I_STACK_N] -= 1
                _work(stack[0, I[I_STACK_N]], stack[1, I[I_STACK_N]], F[F_NOW], F, I, rng, CI, CF, BI, SI, SF, st_rel,
                      sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW,
                      XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, stack, adm, STG, CLC, task_times, task_class,
                      waits_v, waits_s, DB, gbuf, gbuf_n, gbuf_k, cum)


@jit
def start_open(S):
    """Open arrivals (des._Run._start_open): the first arrival on the sim calendar."""
    (F, I, rng, DB, CI, CF, cum, BI, SI, SF, st_rel, sbuf, gbuf, gbuf_n, gbuf_k, sta_free, sta_n, TF, sto_level, OI,
     sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, ev_t, EV,
     stack, done, adm, STG, CLC, task_times, task_class, waits_v, waits_s) = S
    x = _exponential(rng, DB, I, F[F_ARR_MEAN])
    e = I[I_EID]
    I[I_EID] += 1
    I[I_EV_N] = _heap_push(ev_t, EV[EV_E], EV[EV_X], I[I_EV_N], F[F_NOW] + x, e, EV_ARRIVAL)


@jit
def run_to(stop, max_events, S):
    """des._Run._run_to: take the next of the task calendar, the GPU pool's next completion and the sim calendar
    in SimPy's order (time, then event id) until `stop`. Returns STATUS_STOP there (the clock set to `stop`),
    STATUS_CHUNK after `max_events` events and STATUS_GROW when a table needs room (both between events, the clock
    at the last event)."""
    (F, I, rng, DB, CI, CF, cum, BI, SI, SF, st_rel, sbuf, gbuf, gbuf_n, gbuf_k, sta_free, sta_n, TF, sto_level, OI,
     sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, ev_t, EV,
     stack, done, adm, STG, CLC, task_times, task_class, waits_v, waits_s) = S
    inf = np.inf
    now = F[F_NOW]
    rows = XI.shape[1]
    guard = max_events
    while True:
        guard -= 1
        if guard < 0:
            F[F_NOW] = now
            return STATUS_CHUNK
        if (I[I_FREE_TOP] < 2 or task_times.shape[0] - I[I_NTT] < rows + 64
                or waits_v.shape[0] - I[I_NW] < 2 * rows + 64):
            F[F_NOW] = now
            return STATUS_GROW
        tt = cal_t[0] if I[I_CAL_N] > 0 else inf
        armed = F[F_ARMED]
        st = ev_t[0] if I[I_EV_N] > 0 else inf
        t = tt
        if armed < t:
            t = armed
        if st < t:
            t = st
        if t >= stop:
            break
        which = -1  # at a tie, the event filed first (SimPy's order; des._Run._first)
        best = 0
        if tt == t:
            which, best = 0, CAL[CAL_E, 0]
        if armed == t and (which < 0 or I[I_ARMED_EID] < best):
            which, best = 1, I[I_ARMED_EID]
        if st == t and (which < 0 or EV[EV_E, 0] < best):
            which, best = 2, EV[EV_E, 0]
        now = t
        if which == 1:
            nd = _fire(now, F, I, st_rel, RF, RI, rh_tag, rh_seq, rh_task, pw_x, PW, done, adm)
            for q in range(nd):
                task = done[q]  # its model call, at the task's position, completes now
                g = BI[B_S0, XI[X_B, task]] + XI[X_J, task]
                if XI[X_MEAS, task]:
                    d = now - XF[X_TGPU, task]
                    STG[G_TIME, g] += d
                    I[I_GPU_CALLS] += 1
                    F[F_GPU_TIME] += d
                XI[X_J, task] += 1
                _run_task(task, now, F, I, rng, CI, CF, BI, SI, SF, st_rel, sbuf, sta_free, sta_n, TF, sto_level, OI,
                          sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack,
                          cal_t, CAL, stack, adm, STG, CLC, task_times, task_class, waits_v, waits_s)
                if I[I_STACK_N] > 0:  # the work stack's items (tasks admitted after a task's end, an agent's next task)
                    I[I_STACK_N] -= 1
                    _work(stack[0, I[I_STACK_N]], stack[1, I[I_STACK_N]], now, F, I, rng, CI, CF, BI, SI, SF, st_rel,
                          sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x,
                          PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, stack, adm, STG, CLC, task_times,
                          task_class, waits_v, waits_s, DB, gbuf, gbuf_n, gbuf_k, cum)
        elif which == 2:
            kind, c = EV[EV_X, 0] & 1, EV[EV_X, 0] >> 1
            I[I_EV_N] = _heap_pop(ev_t, EV[EV_E], EV[EV_X], I[I_EV_N])
            if kind == EV_START:
                _push_work(stack, I, W_ARRIVE, c)
                if I[I_STACK_N] > 0:  # the work stack's items (tasks admitted after a task's end, an agent's next task)
                    I[I_STACK_N] -= 1
                    _work(stack[0, I[I_STACK_N]], stack[1, I[I_STACK_N]], now, F, I, rng, CI, CF, BI, SI, SF, st_rel,
                          sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x,
                          PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, stack, adm, STG, CLC, task_times,
                          task_class, waits_v, waits_s, DB, gbuf, gbuf_n, gbuf_k, cum)
            else:
                _push_work(stack, I, W_ARRIVE, -1)
                if I[I_STACK_N] > 0:  # the work stack's items (tasks admitted after a task's end, an agent's next task)
                    I[I_STACK_N] -= 1
                    _work(stack[0, I[I_STACK_N]], stack[1, I[I_STACK_N]], now, F, I, rng, CI, CF, BI, SI, SF, st_rel,
                          sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x,
                          PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL, stack, adm, STG, CLC, task_times,
                          task_class, waits_v, waits_s, DB, gbuf, gbuf_n, gbuf_k, cum)
                x = _exponential(rng, DB, I, F[F_ARR_MEAN])
                e = I[I_EID]
                I[I_EID] += 1
                I[I_EV_N] = _heap_push(ev_t, EV[EV_E], EV[EV_X], I[I_EV_N], now + x, e, EV_ARRIVAL)
        else:
            task = CAL[CAL_X, 0]
            I[I_CAL_N] = _heap_pop(cal_t, CAL[CAL_E], CAL[CAL_X], I[I_CAL_N])
            _run_task(task, now, F, I, rng, CI, CF, BI, SI, SF, st_rel, sbuf, sta_free, sta_n, TF, sto_level, OI, sto_q,
                      RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI, tk_cnt, tk_bmax, free_stack, cal_t, CAL,
                      stack, adm, STG, CLC, task_times, task_class, waits_v, waits_s)
            if I[I_STACK_N] > 0:  # the work stack's items (tasks admitted after a task's end, an agent's next task)
                I[I_STACK_N] -= 1
                _work(stack[0, I[I_STACK_N]], stack[1, I[I_STACK_N]], now, F, I, rng, CI, CF, BI, SI, SF, st_rel, sbuf,
                      sta_free, sta_n, TF, sto_level, OI, sto_q, RF, RI, rh_tag, rh_seq, rh_task, KI, pw_x, PW, XF, XI,
                      tk_cnt, tk_bmax, free_stack, cal_t, CAL, stack, adm, STG, CLC, task_times, task_class, waits_v,
                      waits_s, DB, gbuf, gbuf_n, gbuf_k, cum)
    F[F_NOW] = stop
    return STATUS_STOP


@jit
def gpu_snapshot(now, RF, RI):
    """des._GpuPool.snapshot: every replica advanced to `now`; the summed areas of calls in service, of work and
    of empty time."""
    R = RF.shape[1]
    for j in range(R):
        _advance(j, now, RF, RI)
    a_n = 0.0
    a_w = 0.0
    a_e = 0.0
    for j in range(R):
        a_n += RF[R_AN, j]
    for j in range(R):
        a_w += RF[R_AW, j]
    for j in range(R):
        a_e += RF[R_AE, j]
    return a_n, a_w, a_e
