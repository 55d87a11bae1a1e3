"""What the target runs on: model config and loading, the tokenizer, the GGUF block weights and their
compiled kernel, CUDA graphs, this machine and its pass costs, and how closely two computations agree."""
