"""Running an imported graph: the program, its passes, its executors, compiled graphs."""
