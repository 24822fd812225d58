"""Pure rules of the Trainer component: plain data in, plain data out, no I/O."""
