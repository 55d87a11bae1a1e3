"""Benchmarks: our engine against Hugging Face and llama.cpp peers (`cli`, `python -m specviz.bench`),
batched throughput (`batched`), and the shipped measurements the pages read (`measured`, `results`)."""
