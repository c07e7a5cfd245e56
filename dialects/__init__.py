"""The three amk IR levels: ``tensor_op`` → ``tiled_loop`` → ``memory_staged``."""
