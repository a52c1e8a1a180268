"""The compiled run loop's state (advisor/simulation/kernel.py) for one replication: built from a des._Run's
setup (its model, stations, stores, pool, draws and window), run by the kernel, and read back where des._Run keeps
its statistics, so that des._Run's measurement and result serve both engines (des._CompiledRun). Same seed, same
figures as des._Run. It reads the run it is given and does not import des (des imports it when it runs)."""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from advisor.simulation import kernel as K
from advisor.simulation.kernel import CPU, GPU

CHUNK_EVENTS = 200_000
"""Events per kernel call between checks of the wall clock and cancellation (a few tens of milliseconds)."""
TASK_ROWS_SPARE = 64
"""Task rows allocated beyond the closed loop's agents (open arrivals start from this many and double on demand)."""


def prepare(S: tuple) -> None:
    """Compile the kernel's entry points for the state's types, or load them from numba's cache (next to the
    module, else the user's cache directory): the first run on a machine compiles for about 20 s, later runs load
    in well under a second. Done before a replication's wall clock starts, so that the guard limits simulation,
    not compilation."""
    st = numba.typeof(S)
    f1 = types.Array(types.float64, 1, "C")
    f2, i2 = types.Array(types.float64, 2, "C"), types.Array(types.int64, 2, "C")
    for fn, sig in ((K.run_to, (types.float64, types.int64, st)), (K.start_closed, (types.int64, f1, f1, st)),
                    (K.start_open, (st,)), (K.gpu_snapshot, (types.float64, f2, i2))):
        if sig not in fn.signatures:
            fn.compile(sig)


class KernelState:
    """The arrays of one replication, built from `run` (a des._Run after its own setup)."""

    def __init__(self, run):
        self.run = run
        self._build()
        prepare(self.S)

    # ---------------------------------------------------------------------------------------------------- state
    def _build(self) -> None:
        run = self.run
        m, a = run.m, {}
        f64, i64 = np.float64, np.int64
        ncls, nsku = len(m.classes), len(m.skus)
        stations = list(run.queues.values()) + list(run.io.values())
        sta_index = {id(s): i for i, s in enumerate(stations)}
        self.stations = stations
        stores: list = []  # (kind, queue) -> store, in first use
        ci_rows = np.zeros((6, ncls), i64)
        cf_rows = np.zeros((2, ncls))
        blocks: list[tuple[int, int]] = []
        si_rows: list[list[int]] = []
        sf_rows: list[list[float]] = []
        rel: list[list[float]] = []
        gks: dict[float, int] = {}
        g = 0
        for ci, c in enumerate(m.classes):
            for kind, (own, table, row) in enumerate(((c.memory_gb, run.mem, K.C_MSTORE),
                                                      (c.disk_gb, run.disk, K.C_DSTORE))):
                store = table.get(c.queue) if own > 0 else None
                if store is None:
                    ci_rows[row, ci] = -1
                    continue
                key = (kind, c.queue)
                idx = next((i for i, (k, _) in enumerate(stores) if k == key), None)
                if idx is None:
                    stores.append((key, store))
                    idx = len(stores) - 1
                ci_rows[row, ci] = idx
            ci_rows[K.C_ST0, ci], ci_rows[K.C_NST, ci] = g, len(c.stages)
            ci_rows[K.C_BLK0, ci], ci_rows[K.C_NBLK, ci] = len(blocks), len(c.blocks)
            cf_rows[K.C_MEM, ci], cf_rows[K.C_DISK, ci] = c.memory_gb, c.disk_gb
            for block in c.blocks:
                if block != list(range(block[0], block[0] + len(block))):
                    raise ValueError("a block of stages must be consecutive")
                blocks.append((g + block[0], len(block)))
            for i, s in enumerate(c.stages):
                station = run._station(s)
                gbuf = -1
                if s.count_cv > 0:
                    k = 1.0 / (s.count_cv * s.count_cv)  # des._Draws.gamma keys its buffers by this shape
                    gbuf = gks.setdefault(k, len(gks))
                si_rows.append([s.kind, sta_index[id(station)] if station is not None else -1, gbuf, 0])
                dm, dcv = run.draw_par[ci][i]
                sf_rows.append([s.parallelism if s.kind == CPU else 1.0, s.count, s.count_cv, dm, dcv,
                                1.0 / (dcv * dcv) if dcv > 0 else 0.0])
                rel.append(list(s.rel) if s.kind == GPU else [0.0] * nsku)
            g += len(c.stages)
        G = g
        a["CI"], a["CF"] = ci_rows, cf_rows
        a["cum"] = np.array(run.cum, f64)
        a["BI"] = np.array(blocks, i64).T.copy()
        a["SI"] = np.array(si_rows, i64).T.copy()
        a["SF"] = np.array(sf_rows, f64).T.copy()
        a["st_rel"] = np.array(rel, f64).reshape(G, nsku) if nsku else np.zeros((G, 1))
        a["sbuf"] = np.zeros((G, K.BLOCK))
        nk = max(1, len(gks))
        a["gbuf"], a["gbuf_n"], a["gbuf_k"] = np.zeros((nk, K.BLOCK)), np.zeros(nk, i64), np.ones(nk)
        for k, i in gks.items():
            a["gbuf_k"][i] = k
        a["DB"] = np.zeros((2, K.BLOCK))
        a["sta_free"] = np.zeros((max(1, len(stations)), max((s.slots for s in stations), default=1)))
        a["sta_n"] = np.array([s.slots for s in stations] or [1], i64)
        a["TF"] = np.zeros((3, max(1, len(stations))))
        a["sto_level"] = np.array([st.level for _, st in stores] or [0.0], f64)
        a["OI"] = np.zeros((3, max(1, len(stores))), i64)
        a["OI"][K.O_KIND, :len(stores)] = [k[0] for k, _ in stores]
        self.nstores = len(stores)
        reps = run.gpu.replicas if run.gpu is not None else []
        R = len(reps)
        a["RF"] = np.zeros((9, R))
        a["RF"][K.R_L0], a["RF"][K.R_D], a["RF"][K.R_SPEED] = ([r.l0 for r in reps], [r.d for r in reps],
                                                                [r.speed for r in reps])
        a["RF"][K.R_NT] = math.inf
        a["RI"] = np.zeros((5, R), i64)
        a["RI"][K.R_SKU], a["RI"][K.R_CAP] = [r.sku for r in reps], [r.cap for r in reps]
        capmax = max((r.cap for r in reps), default=1)
        a["rh_tag"], a["rh_seq"], a["rh_task"] = (np.zeros((R, capmax)), np.zeros((R, capmax), i64),
                                                  np.zeros((R, capmax), i64))
        by_sku = run.gpu.by_sku if run.gpu is not None else []
        a["KI"] = np.array([[rs[0].idx for rs in by_sku] or [0], [len(rs) for rs in by_sku] or [0]], i64)
        a["STG"] = np.zeros((2, G))
        a["CLC"] = np.zeros((2, ncls), i64)
        a["task_times"], a["task_class"] = np.zeros(0), np.zeros(0, i64)  # sized by `_tables`
        a["waits_v"], a["waits_s"] = np.zeros(0), np.zeros(0, i64)
        a["done"] = np.zeros(max(1, sum(r.cap for r in reps)), i64)
        n_ev = (run.st.agents or 0) + 2
        a["ev_t"], a["EV"] = np.zeros(n_ev), np.zeros((2, n_ev), i64)
        F = np.zeros(K.N_F)
        F[K.F_NOW], F[K.F_ARMED], F[K.F_W0], F[K.F_W1] = 0.0, math.inf, run.w0, run.w1
        I = np.zeros(K.N_I, i64)
        I[K.I_CLOSED] = 1 if run.st.agents else 0
        I[K.I_SINGLE] = 1 if run.gpu is not None and run.gpu.single else 0
        I[K.I_NSKU] = nsku
        a["F"], a["I"], a["rng"] = F, I, run.rng
        self.a, self.R = a, R
        self._tasks(0, (run.st.agents or 0) + TASK_ROWS_SPARE)

    def _tasks(self, old: int, rows: int) -> None:
        """Give the task table `rows` rows (growing from `old`, between events): the per-task arrays keep their
        rows, and what holds tasks in order (the GPU pool's FIFO ring, the sandbox stores' rings) is unrolled into
        the larger rings."""
        a, I, i64 = self.a, self.a["I"], np.int64

        def grow(name, shape):
            new = np.zeros(shape, a[name].dtype if old else (np.float64 if name in ("XF", "cal_t", "pw_x") else i64))
            if old:
                new[..., :old] = a[name]
            a[name] = new

        grow("XF", (2, rows))
        grow("XI", (7, rows))
        grow("cal_t", (rows,))
        grow("CAL", (2, rows))
        nst = max(int(a["CI"][K.C_NST].max()), 1)
        nbl = max(int(a["CI"][K.C_NBLK].max()), 1)
        for name, width in (("tk_cnt", nst), ("tk_bmax", nbl)):
            new = np.zeros((rows, width), i64)
            if old:
                new[:old] = a[name]
            a[name] = new
        free = np.zeros(rows, i64)
        top = int(I[K.I_FREE_TOP])
        if old:
            free[:top] = a["free_stack"][:top]
        free[top:top + rows - old] = np.arange(rows - 1, old - 1, -1)
        a["free_stack"] = free
        I[K.I_FREE_TOP] = top + rows - old
        pw_x, PW = np.zeros(rows), np.zeros((2, rows), i64)
        if old:
            idx = (int(I[K.I_PW_HEAD]) + np.arange(int(I[K.I_PW_N]))) % old
            pw_x[:len(idx)], PW[:, :len(idx)] = a["pw_x"][idx], a["PW"][:, idx]
        a["pw_x"], a["PW"] = pw_x, PW
        I[K.I_PW_HEAD] = 0
        q = np.zeros((max(1, self.nstores), rows), i64)
        if old:
            for k in range(self.nstores):
                idx = (int(a["OI"][K.O_HEAD, k]) + np.arange(int(a["OI"][K.O_N, k]))) % old
                q[k, :len(idx)] = a["sto_q"][k, idx]
                a["OI"][K.O_HEAD, k] = 0
        a["sto_q"] = q
        a["stack"] = np.zeros((2, 2 * rows + 16), i64)  # empty between events
        a["adm"] = np.zeros(max(rows, self.R, 1), i64)
        self.rows = rows
        self._tables()

    def _tables(self) -> None:
        """Room for the measured task times and tool waits: the kernel stops for more before an event could fill
        them (it keeps at least the task rows, and twice them, spare)."""
        a, I = self.a, self.a["I"]
        for vals, idx, used, spare in (("task_times", "task_class", K.I_NTT, self.rows + 64),
                                       ("waits_v", "waits_s", K.I_NW, 2 * self.rows + 64)):
            n = int(I[used])
            if a[vals].shape[0] - n >= spare:
                continue
            size = max(2 * a[vals].shape[0], n + 4 * spare)
            for name in (vals, idx):
                new = np.zeros(size, a[name].dtype)
                new[:n] = a[name][:n]
                a[name] = new
        self.S = tuple(a[n] for n in K.STATE_FIELDS)

    # ------------------------------------------------------------------------------------------------- running
    def pending(self) -> int:
        """Measured tasks not yet finished."""
        return int(self.a["I"][K.I_OUTSTANDING])

    def start_closed(self, cum: list[float], ut: list[float]) -> None:
        K.start_closed(self.run.st.agents, np.array(cum, np.float64), np.array(ut, np.float64), self.S)

    def start_open(self, rate_s: float) -> None:
        self.a["F"][K.F_ARR_MEAN] = 1.0 / rate_s
        K.start_open(self.S)

    def run_to(self, until: float, env, check_limits) -> None:
        """des._Run._run_to on the kernel, in chunks of events with `check_limits` between them; keeps `env`'s
        clock."""
        F = self.a["F"]
        now = float(F[K.F_NOW])
        if until <= now:
            return
        stop = now + (until - now)  # as des._Run._run_to
        while True:
            status = K.run_to(stop, CHUNK_EVENTS, self.S)
            env._now = float(F[K.F_NOW])
            if status == K.STATUS_STOP:
                return
            if status == K.STATUS_GROW:
                if self.a["I"][K.I_FREE_TOP] < 2:
                    self._tasks(self.rows, 2 * self.rows)
                else:
                    self._tables()
            check_limits()

    def take(self):
        """des._Run._take: the GPU pool's areas (its replicas advanced to now) and the stations' busy areas."""
        a, run = self.a, self.run
        g = K.gpu_snapshot(float(a["F"][K.F_NOW]), a["RF"], a["RI"]) if self.R else None
        TF, nq = a["TF"], len(run.queues)
        return (g,
                {n: (float(TF[K.T_AREA_C, i]), float(TF[K.T_AREA_S, i])) for i, n in enumerate(run.queues)},
                {n: (float(TF[K.T_AREA_C, nq + i]), float(TF[K.T_AREA_S, nq + i])) for i, n in enumerate(run.io)})

    def collect(self) -> None:
        """Copy the kernel's statistics where des._Run keeps them (its result reads them there)."""
        a, I, F, run = self.a, self.a["I"], self.a["F"], self.run
        run.env._now = float(F[K.F_NOW])
        run.completions = int(I[K.I_COMPLETIONS])
        run.outstanding = int(I[K.I_OUTSTANDING])
        run.class_completions = a["CLC"][K.L_COMP].tolist()
        run.measured_by_class = a["CLC"][K.L_MEAS].tolist()
        ntt = int(I[K.I_NTT])
        run.task_times = a["task_times"][:ntt].copy()
        run.task_class = a["task_class"][:ntt].tolist()
        run.gpu_calls = int(I[K.I_GPU_CALLS])
        run.gpu_call_time = float(F[K.F_GPU_TIME])
        st0 = a["CI"][K.C_ST0]
        run.stage_time = [a["STG"][K.G_TIME, st0[ci]:st0[ci] + len(c.stages)].tolist()
                          for ci, c in enumerate(run.m.classes)]
        run.stage_wait = [a["STG"][K.G_WAIT, st0[ci]:st0[ci] + len(c.stages)].tolist()
                          for ci, c in enumerate(run.m.classes)]
        nw = int(I[K.I_NW])
        wv, ws = a["waits_v"][:nw], a["waits_s"][:nw]
        for i, s in enumerate(self.stations):
            s.waits = wv[ws == i].tolist()
            s.wait_sum = float(a["TF"][K.T_WSUM, i])
