"""
Tokens on the circle: clustering and the projection Pi
=======================================================

In d = 2 the tokens live on the circle and each one is an angle. Starting from 64 equally spaced
angles, the attention flow of a symmetric A (B = I) at beta = 20 gathers them into clusters; the
zero-temperature flow moves each token to its projection Pi(x), a point of the top eigenspace of A
(the two angles of +-u_1). The plot shows every token's angle against time (the dashed lines: the
angles of +-u_1), and ``count_clusters`` counts the clusters at the end.
"""

import matplotlib.pyplot as plt
import numpy as np

import attnflow as af

A = np.array([[1.0, 0.3], [0.3, -0.5]])  # symmetric: top eigenvalue simple, gap about 1.6
B = np.eye(2)
att = af.attention_from_A(A, B, beta=20.0)
X0 = af.circle_nodes(64)  # (64, 2), equally spaced angles
times = np.linspace(0.0, 8.0, 81)
traj = af.simulate(X0, att, times, method="rk4", dt=0.02)


def in_window(theta):
    """Angles shifted by multiples of 2 pi into [-pi/2, 3 pi/2), where neither cluster meets the cut."""
    return theta - 2 * np.pi * np.floor((theta + np.pi / 2) / (2 * np.pi))


angles = np.unwrap(np.arctan2(traj.x[..., 1], traj.x[..., 0]), axis=0)  # (T, N), continuous in t
angles += in_window(angles[-1]) - angles[-1]  # each token ends in the window
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(times, angles, color="tab:blue", lw=0.6)
Pi = af.project(X0, att)  # (N, 2): +-u_1
for a in np.unique(np.round(in_window(np.arctan2(Pi[:, 1], Pi[:, 0])), 6)):
    ax.axhline(a, color="k", ls="--", lw=0.8)
ax.set_xlabel("t")
ax.set_ylabel("angle of x_i(t)")
ax.set_title(f"{af.count_clusters(traj.x[-1], eps=0.05)} clusters at t = {times[-1]:g}")
fig.tight_layout()
