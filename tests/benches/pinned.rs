//! Pinned buffers from the default pinned pool, 1 MiB, against the pool's own allocate and
//! deallocate in the same run: a buffer taken unwritten (`new_uninit`), a zeroed one (`new`),
//! and a copy of a slice (`from_slice`, against the pool's pair plus one `memcpy`).
//! `tests/benches/pinned_cupy.py` times CuPy's pinned memory pool on the same size.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::alloc::PinnedAllocator;
use cuhost::{Context, Device, PinnedBuffer, Result};
use cuhost::{alloc, pool};
use std::hint::black_box;

const MIB: usize = 1 << 20;

fn main() {
    match run() {
        Ok(rows) => {
            print_table("1 MiB pinned buffers from the default pool against its own calls (same run)", &rows)
        }
        Err(e) => eprintln!("benchmark skipped: {e}"),
    }
}

/// The pool's own allocate+deallocate of `bytes`, with `fill` run on the memory in between.
fn pool_pair(bytes: usize, fill: impl Fn(*mut u8)) {
    let Ok(p) = pool::default_pinned_memory_pool() else { return };
    if let Ok(a) = p.allocate(black_box(bytes)) {
        fill(a.ptr);
        // SAFETY: allocated just above and given back once; no copy uses it.
        black_box(unsafe { p.deallocate(a) }).ok();
    }
}

fn run() -> Result<Vec<Row>> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    alloc::set_pinned_memory_allocator(None);
    let source = vec![7u8; MIB];
    let mut rows = Vec::new();
    rows.push(compare(
        "PinnedBuffer::new_uninit + drop vs pool allocate + deallocate",
        31,
        20_000,
        || {
            // SAFETY: nothing reads the buffer.
            black_box(unsafe { PinnedBuffer::<u8>::new_uninit(black_box(MIB)) }.ok());
        },
        || pool_pair(MIB, |_| ()),
    ));
    rows.push(compare(
        "PinnedBuffer::new (zeroed) + drop vs pool allocate + deallocate",
        31,
        2_000,
        || {
            black_box(PinnedBuffer::<u8>::new(black_box(MIB)).ok());
        },
        || pool_pair(MIB, |_| ()),
    ));
    rows.push(compare(
        "PinnedBuffer::from_slice + drop vs pool pair + one memcpy",
        31,
        2_000,
        || {
            black_box(PinnedBuffer::from_slice(black_box(&source)).ok());
        },
        || {
            pool_pair(MIB, |p| {
                // SAFETY: `p` holds MIB bytes, a separate allocation from `source`.
                unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), p, MIB) };
                black_box(p);
            })
        },
    ));
    Ok(rows)
}
