"""Control plane: the metadata-only driver, group lifecycle, grader, sampler, hooks, OPD, batch yield."""
