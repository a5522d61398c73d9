"""Where jobs really run: real processes on this machine (``local``), later Kubernetes."""
