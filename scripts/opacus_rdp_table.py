#!/usr/bin/env python3
"""Reference table for xform's RDP accountant (`xform::dp::accountant`),
computed by Opacus's own RDP accountant.

Regenerate (from the repository root) with a Python that has opacus 1.6.0:

    /root/.cache/xform-peers-venv/bin/python scripts/opacus_rdp_table.py tests/data/rdp

It writes two CSV files, read by tests/suite/accountant.rs (checked in):

    opacus_rdp.csv    history,delta,epsilon,order
        `history` is one or more phases `sigma:q:steps` joined by `;`;
        epsilon and the best order are `RDPAccountant.get_privacy_spent`
        with that history and Opacus's DEFAULT_ALPHAS.
    opacus_noise.csv  target_epsilon,q,steps,delta,sigma
        `sigma` is `get_noise_multiplier(..., accountant="rdp")` with its
        default epsilon_tolerance=0.01.

Every float is written with Python's repr (round-trips exactly).
"""

import csv
import itertools
import os
import sys
import warnings

import opacus
from opacus.accountants import RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

SAMPLE_RATES = [1e-4, 0.001, 0.01, 0.05, 0.256, 1.0]
NOISE_MULTIPLIERS = [0.5, 0.8, 1.0, 1.1, 2.0, 5.0, 10.0]
STEPS = [1, 10, 100, 1000, 10000, 100000]
DELTAS = [1e-5, 1e-6, 1e-8]

# Histories of more than one phase (sigma, q, steps), and edge cases:
# q = 0 (no example is ever used) and sigma = 0 (no noise: infinite epsilon).
MIXED = [
    [(1.0, 0.01, 1000), (2.0, 0.05, 500)],
    [(0.8, 0.004, 3000), (1.3, 0.004, 2000)],
    [(5.0, 0.256, 100), (0.7, 0.001, 20000)],
    [(1.1, 1.0, 10), (1.1, 0.02, 4000)],
    [(2.0, 0.01, 100), (1.0, 0.01, 100), (0.6, 0.1, 30)],
    [(1.5, 0.03, 777), (3.0, 0.3, 55), (1.5, 0.03, 777)],
    [(1.0, 0.0, 10)],
    [(0.0, 0.01, 10)],
]

NOISE_CASES = [
    (target, q, steps, delta)
    for target in [1.0, 3.0, 8.0]
    for (q, steps, delta) in [(0.01, 1000, 1e-5), (0.004, 25000, 1e-5), (0.256, 100, 1e-6), (0.001, 100000, 1e-8)]
]


def spent(history, delta):
    acc = RDPAccountant()
    acc.history = list(history)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return acc.get_privacy_spent(delta=delta)


def main(out_dir):
    assert opacus.__version__ == "1.6.0", opacus.__version__
    os.makedirs(out_dir, exist_ok=True)
    histories = []
    # The full grid of (q, sigma, steps); delta cycles through DELTAS so
    # that the table stays a few hundred rows.
    for n, (q, sigma, steps) in enumerate(itertools.product(SAMPLE_RATES, NOISE_MULTIPLIERS, STEPS)):
        histories.append(([(sigma, q, steps)], DELTAS[n % len(DELTAS)]))
    for n, h in enumerate(MIXED):
        histories.append((h, DELTAS[n % len(DELTAS)]))
    with open(os.path.join(out_dir, "opacus_rdp.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["history", "delta", "epsilon", "order"])
        for history, delta in histories:
            eps, order = spent(history, delta)
            hist = ";".join(f"{s!r}:{q!r}:{t}" for s, q, t in history)
            w.writerow([hist, repr(delta), repr(float(eps)), repr(float(order))])
    with open(os.path.join(out_dir, "opacus_noise.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["target_epsilon", "q", "steps", "delta", "sigma"])
        for target, q, steps, delta in NOISE_CASES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sigma = get_noise_multiplier(
                    target_epsilon=target, target_delta=delta, sample_rate=q, steps=steps, accountant="rdp"
                )
            w.writerow([repr(target), repr(q), steps, repr(delta), repr(float(sigma))])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/rdp")
