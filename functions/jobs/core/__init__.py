"""Pure rules of the training-job controllers: plain data in, plain data out, no I/O."""
