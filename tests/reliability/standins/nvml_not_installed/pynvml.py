"""Stand-in for a node without nvidia-ml-py: placed first on PYTHONPATH, `import pynvml` fails
exactly as it does when the package is not installed."""

raise ImportError("No module named 'pynvml'")
