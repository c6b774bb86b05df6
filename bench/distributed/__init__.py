"""Sweeps spread over a Ray cluster (`bench sweep --ray`): one Ray task per engine configuration, placed by Ray on
a node with the accelerators it needs, the driver the single writer of the results directory. `placement` is pure
(no Ray import); `cluster`, `driver` and `worker` need the `ray` extra."""
