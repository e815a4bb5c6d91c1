/*
 * cuda_core_memory.h: allocate device memory from cuda-core's current allocator in C or C++.
 *
 * The functions are defined by the Rust crate cuda-core (module `cuhost::pool::capi`) and
 * are available in any process that links it. A handle captures the allocator that is current
 * on the calling thread when the handle is made (see `cuhost::pool::get_allocator`): by
 * default the device's memory pool, in the context current on that thread. Memory comes from
 * that allocator and is ordered on the legacy default stream.
 *
 * Ownership
 *   - A handle is owned by the caller of cuda_core_get_allocator_handle() and released by
 *     cuda_core_destroy_allocator_handle(), exactly once.
 *   - A pointer returned by cuda_core_malloc() is owned by the caller until it is passed to
 *     cuda_core_free() with the same handle. Destroying a handle frees every pointer still
 *     allocated through it; those pointers must not be used afterwards.
 *   - With a pool as the allocator, freed memory goes back to the pool (not to the driver) and
 *     may be handed out again at once: no work still queued on another stream may use it.
 *
 * Thread safety
 *   - A handle may be used from several threads at once: its table of live pointers is
 *     guarded by a lock held only to add or remove one entry, and the allocators are
 *     thread-safe. A handle keeps using the allocator it captured, whichever thread calls.
 *   - Destroying a handle must not race with other calls on it.
 *   - The last error is kept per thread: read it on the thread whose call failed.
 *
 * Errors
 *   - cuda_core_get_allocator_handle() and cuda_core_malloc() return NULL on failure;
 *     cuda_core_free() returns nothing. Every failed call keeps its reason on the calling
 *     thread, replacing any earlier one, for cuda_core_get_last_error().
 *   - A NULL handle is refused (an error is kept, nothing else happens). cuda_core_free() of
 *     NULL does nothing; of a pointer this handle did not allocate, it keeps an error and
 *     frees nothing. cuda_core_malloc() of 0 bytes returns NULL and is not an error.
 *   - A panic inside a Rust allocator does not cross into C: it is caught and kept as an error.
 */
#ifndef CUDA_CORE_MEMORY_H
#define CUDA_CORE_MEMORY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An allocator captured from a thread; opaque, only ever used through a pointer. */
typedef struct cuda_core_allocator_handle cuda_core_allocator_handle;

/*
 * Makes a handle to the calling thread's current allocator. Returns NULL when there is none
 * (for instance no CUDA driver, or no context current on this thread for the default pool).
 * Release it with cuda_core_destroy_allocator_handle().
 */
cuda_core_allocator_handle *cuda_core_get_allocator_handle(void);

/*
 * Allocates at least `size` bytes of device memory through `handle` and returns its device
 * address as a pointer (not dereferenceable on the host). Returns NULL on failure (out of
 * memory, a driver error, a NULL handle) and for a size of 0.
 */
void *cuda_core_malloc(cuda_core_allocator_handle *handle, size_t size);

/*
 * Gives back `ptr`, which cuda_core_malloc() returned for this same handle. NULL does
 * nothing. Work on the legacy default stream queued before this call may still use the
 * memory; work on other streams must have completed.
 */
void cuda_core_free(cuda_core_allocator_handle *handle, void *ptr);

/*
 * Destroys `handle`, first freeing every pointer still allocated through it. NULL does
 * nothing. The handle must not be used afterwards, by any thread.
 */
void cuda_core_destroy_allocator_handle(cuda_core_allocator_handle *handle);

/*
 * Takes the error of this thread's most recent failed call: writes its message, truncated to
 * `len - 1` bytes and NUL-terminated, into `buf` (when `buf` is not NULL and `len` > 0), and
 * returns the full message length without the NUL (call with NULL, 0 first to size a buffer
 * and the message is kept; any other call clears it). Returns 0 when no call has failed since
 * the error was last taken.
 */
size_t cuda_core_get_last_error(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_CORE_MEMORY_H */
