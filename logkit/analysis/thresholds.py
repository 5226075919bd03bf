"""The analysis' policy in numbers: every threshold a figure or a finding is judged by, in one place.

The definitions (``definitions.py``) and the analyses read them from here, so a definition
states the threshold the code applies.
"""

from __future__ import annotations

# steady state (throughput.py)
WARMUP_TOLERANCE = 0.05  # a step within 5% (or 3 robust SD) of the second half's median is steady
MIN_STEADY_STEPS = 4  # fewer timed steps (two sampled text lines): no steady-state figures
N_BOOT = 1000  # bootstrap resamples of the steady throughput
MAX_BLOCKS = 200  # consecutive blocks the steady steps are cut into for the bootstrap
CI_LEVEL = 0.95

# scaling (scaling.py, amdahl.py)
MIN_R2 = 0.9  # an Amdahl fit below this predicts nothing
SAMPLES_RATIO_TOLERANCE = 0.05  # runs whose samples seen differ by more saw different data

# communication (communication.py, nccl_tests.py)
NEAR_PEAK = 0.60  # busbw at or above 60% of the link's peak: bandwidth-bound
REACH = 0.80  # nccl-tests: the size at which busbw first reaches 80% of the sweep's max
COMM_BOUND_SHARE = 0.30  # gradient sync >= 30% of step time: communication-bound

# performance (performance.py)
SLOW_FACTOR = 3.0  # a step slower than 3x its rank's median is slow
STRAGGLER_SCORE = 0.05  # a straggler is late or slow by more than 5% of a step (less is not worth acting on)
BUSY_UTIL, IDLE_UTIL = 50.0, 10.0  # one GPU busy while the others idle: device_map="auto"

# findings (diagnose.py)
LOW_UTIL = 50.0  # average GPU utilization below this: low
LOW_EFFICIENCY = 0.7  # headline scaling efficiency below this: low
SLOW_STEPS_WARNING = 0.01  # slow steps above 1% of the steps: a warning, else info

# why a run is slow (breakdown.py)
ARRIVAL_MARGIN = 0.02  # a step's last arrival came 2% of a step after the next one (else no one was last)
STRAGGLER_SHARE = 0.5  # the straggler was its steps' last arrival (or slowest rank) in at least half of them
# A rank is last in about 1/n of the steps by chance alone: with 2 ranks, a coin flip per step. Its
# count of last arrivals must be one a fair draw makes with a chance below 1% (binomial tail,
# Bonferroni-corrected over the n ranks the candidate is picked from): one false alarm in 100 runs
# of a fair draw, and 8 steps of 8 the fewest that can name one of 2 ranks.
STRAGGLER_ALPHA = 0.01
# Its lateness (or its median step over the fastest rank's) must also stand out from the run's own
# noise: above 2 robust standard deviations (1.4826 x MAD) of the step times across steps, the
# usual bar for "outside the spread". A rank last by a consistent 4 ms in steps that vary by 5 ms
# (a busy host, the main rank's extra logging) is not what holds a run back.
STRAGGLER_NOISE = 2.0
CAUSE_SHARE = 0.5  # a phase that explains at least half of the straggler's lateness is its cause
DATA_HEAVY = 0.2  # data loading above 20% of a step is worth advice on its own

# live alerts (alerts.py): what interrupts a person while a run trains
# A stall: no step for max(STALL_MIN_S, STALL_FACTOR x the median step), the limit the emitter's stall watch
# also keeps by default (the NCCL watchdog waits 30 minutes). The alert comes within it: at STALL_EARLY of the
# limit when the logs name the rank the others wait for, else at STALL_LATE of it (a refresh, 2 s at most, and
# the writer's half-second flush later it is still within the limit).
STALL_MIN_S = 60.0
STALL_FACTOR = 10.0
STALL_EARLY = 0.5
STALL_LATE = 0.9
# A slowdown of 20% or more: the median of a rank's last SLOWDOWN_RECENT step times at least SLOWDOWN_RATIO x
# the median of the window's steps before them (at least SLOWDOWN_MIN_EARLIER of them), at SLOWDOWN_CHECKS
# checks in a row (a check: a refresh that brought the rank new steps). The bar is 15%, not 20%: two medians
# of 20-30 noisy step times differ by a few percent, which would hide half the slowdowns of exactly 20%. A
# median of 20 moves only when half of the 20 steps are slow, so a few slow steps (a checkpoint, a GC pause)
# never raise it, and a 20% slowdown at 20 steps/s and a 1 s refresh is raised within 50 steps. It clears when
# the recent median is back under SLOWDOWN_CLEAR x the median it was compared with when raised.
SLOWDOWN_RATIO = 1.15
SLOWDOWN_RECENT = 20
SLOWDOWN_MIN_EARLIER = 20
SLOWDOWN_CHECKS = 2
SLOWDOWN_CLEAR = 1.075
# A straggler appears: the window's stragglers table names a rank in STRAGGLER_CHECKS analyses in a row that it
# did not name before; cleared when it names it in none of STRAGGLER_CLEAR analyses in a row.
STRAGGLER_CHECKS = 2
STRAGGLER_CLEAR = 3

# sharded runs (memory_balance.py, issue 25)
UNEVEN_MEMORY_MIB = 2048  # one rank's allocator peak 2 GiB above the least's: ranks uneven
# work one rank does alone while the others wait in the next collective (solo_work.py, issue 25). Every
# other rank's wait at a step's collectives, above its own median wait, must exceed all of: half a median
# step (less is not a material share of the run's time), SOLO_WORK_NOISE robust SD of the ranks' arrival
# lateness (a run of thousands of steps draws 4-SD jitter by chance; 6 it does not) and SOLO_WORK_MIN_S.
# The rank's own work must explain SOLO_WORK_EXPLAINED of that wait: its timed phases less the same
# phases' time on the others (work done together is no one's alone), or else its unrecorded time between
# steps above its median, then at least SOLO_GAP_MIN_S (a GC pause or a busy host is not solo work).
SOLO_WORK_STEP_SHARE = 0.5
SOLO_WORK_NOISE = 6.0
SOLO_WORK_MIN_S = 0.25
SOLO_WORK_EXPLAINED = 0.5
SOLO_GAP_MIN_S = 1.0
# --- multi-node (issue 26) ---
HOST_SYNC_SPREAD = 0.80  # a host whose ranks' median inter-node busbw is below 80% of the fastest host's: slower
# the forecast (forecast.py): when two runs say enough, and how wide its interval is
FORECAST_LEVEL = 0.80  # the interval's level
# Too short: a measured run with fewer steady steps than this gives no forecast (a steady step time
# from a handful of steps carries the warm-up's tail and one slow step moves it by 10% or more).
FORECAST_MIN_STEPS = 8
# Too noisy: a measured run whose steady steps vary by more than this (1.4826 x MAD / median) gives
# no forecast: an 80% interval of +-1.28 x that around the step time would span half of it or more.
FORECAST_MAX_SPREAD = 0.20
# A component's fit uncertainty is the spread of its estimates over the measured runs, at least this
# (two runs that agree exactly still measured each component with their steps' noise).
FORECAST_MIN_UNCERTAINTY = 0.03
# One multi-rank size measures the collective's time at one n: the bus factor carries it to other n
# (bandwidth-bound); the latency part, which grows with the ring's 2(n-1) hops, is not measured. This
# is its allowance either way, of the forecast communication time.
FORECAST_COMM_ALLOWANCE = 0.25
# The wait for the last rank is carried from the sizes measured by the expected maximum of n normal
# draws: a shape assumption (arrival spreads are rarely normal), allowed half of it either way.
FORECAST_WAIT_ALLOWANCE = 0.5
# GPUs a node holds when the logs say neither the launcher's local ranks nor the GPUs a host sampled
# (the 8-GPU server is the common node): where a forecast of a GPU run stops without an inter-node run.
FORECAST_NODE_GPUS = 8
