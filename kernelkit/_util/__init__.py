"""Utilities every room uses: file I/O (:mod:`.io`), the device resolver (:mod:`.device`),
argument validation (:mod:`.validation`) and the host memory available (:mod:`.host_memory`).
Imports nothing else of kernelkit."""
