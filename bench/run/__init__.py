"""One engine configuration's points on this machine, whether a local sweep or a Ray node runs it: the executor, one trial, and the progress tracker."""
