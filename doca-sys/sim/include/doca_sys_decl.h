/*
 * rdma-container: helpers shared by our DOCA declaration headers.
 *
 * Not a DOCA header. Enumerations in our headers are written as X-macro lists, so
 * that one list both defines the enumeration (normal builds) and, in the
 * conformance check, asserts that every value equals the one in NVIDIA's headers.
 *
 * DOCA_SYS_CONFORMANCE_CHECK: defined only by conformance/check.c, which includes
 * the real SDK headers first. Type definitions with a body (enums, unions) are
 * then skipped, since C forbids defining a tag twice; everything else (prototypes,
 * typedefs, macros) is still seen by the compiler and must match the SDK exactly.
 */
#ifndef DOCA_SYS_DECL_H
#define DOCA_SYS_DECL_H

#define DOCA_SYS_ENUMERATOR(name, value) name = (value),

#endif /* DOCA_SYS_DECL_H */
