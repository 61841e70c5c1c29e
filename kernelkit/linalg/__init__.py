"""Linear algebra on kernel operators: one preconditioned CG (:mod:`.cg`), the low-rank
preconditioner (:mod:`.precond`), stochastic Lanczos quadrature (:mod:`.slq`), the
predictive-variance cache (:mod:`.galerkin`), the Falkon system (:mod:`.falkon`, its row-sharded
variant :mod:`.falkon_sharded`) and dense float64 solves (:mod:`.dense`). They see a matvec or an
operator, never an estimator.
"""
