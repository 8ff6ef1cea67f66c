"""
W2 to the projected measure at three inverse temperatures
==========================================================

The worked example of the paper (d = 3, Q = I, K = diag(3, 1, 1/3), A symmetric): N = 300 uniform
tokens moved by the attention flow with RK4 at three values of beta, and the exact W2 distance
between the tokens' measure rho_t and Pi_# rho_0, the initial measure projected onto the top
eigenspace of A (two atoms, +-u_1). The zero-temperature flow (beta = inf, solved exactly) is drawn
for comparison. W2 falls to a minimum at t* and rises again as the tokens, at finite beta, keep
moving; the larger beta, the longer the tokens follow the zero-temperature flow.

300 tokens do not resolve the mean-field flow at these betas: the figure shows the shape of the
curves, not the theorem's scaling (see the ``concentration`` experiment for converged curves).
"""

import matplotlib.pyplot as plt
import numpy as np

import attnflow as af

att = af.worked_example(beta=1.0)
X0 = af.sample_uniform(300, 3, seed=0)  # (N, d), unit rows
target = af.project(X0, att)  # Pi(x_i(0)): the two atoms +-u_1, (N, d)
times = np.linspace(0.0, 6.0, 31)

fig, ax = plt.subplots(figsize=(6, 4))
for beta in (3.0, 30.0, 300.0):
    traj = af.simulate(X0, att.with_beta(beta), times, method="rk4", dt=0.05)
    w2 = af.w2_to_target(traj.x, target).values  # (T,)
    best = af.t_star(times, w2)
    ax.plot(times, w2, label=f"beta = {beta:g} (t* = {best.t_star:.1f})")
zero = af.simulate_zero_temperature(X0, att, times)
ax.plot(times, af.w2_to_target(zero.x, target).values, "k--", label="beta = inf")
ax.set_xlabel("t")
ax.set_ylabel("W2(rho_t, Pi_# rho_0)")
ax.set_yscale("log")
ax.legend()
fig.tight_layout()
