"""Pure rules about the platform's own controllers: plain data in, plain data out, no I/O."""
