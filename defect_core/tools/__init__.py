"""Tools the model can call, and the backends they touch files and processes through."""
