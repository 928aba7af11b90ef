"""The compiled tier: programs that replace the general path for a signature, behind guards.

A front end (`capture`: a run of the rewritten function on a capture tape; `eligibility`: what a
replay cannot reproduce, read off the bytecode), guards (`guards`), back ends that turn the tape
into one generated function (`lower_numpy`: straight-line NumPy; `lower_numba`, `numba_kernel`,
`numba_fused`: one Numba kernel), named passes over the IR (`passes`: dead code, the reverse
schedule, the summed bias, value-only records, buffer reuse), the lowering's side of the last two
(`reuse`: buffer reuse's rules and dead operands; `parts`: value-only, shared parts), the artefact (`program`), pullback programs (`pullback`), the
on-disk store (`store`), the policy that decides when to capture, tier up and give up
(`policy`), and the writing of a NumPy program as a standalone module (`export`, with the NumPy
twins of the helpers and rules it calls in `export_helpers`; `bytegrad.export`). Nothing here is
imported by `import bytegrad`: `bytegrad.api` loads `policy` when a function is first
differentiated, and Numba is imported only when a Numba program is built.

The general path (`bytegrad.runtime`) does not import this package.
"""
