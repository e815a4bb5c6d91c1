//! `cuhost::memory` batches: `CopyBatch` (`cuMemcpyBatchAsync`, CUDA 12.8) between device,
//! pinned and pinned-chunk memory, `CopyBatch3D` (`cuMemcpy3DBatchAsync`, CUDA 12.8) between
//! arrays, pitched buffers and volumes of device or pinned memory, and the managed-memory
//! batches `PrefetchBatch`, `DiscardBatch` and `DiscardPrefetchBatch` (CUDA 13.0): contents
//! checked element by element, bad input refused before any call, buffers dropped right after
//! a submit kept until the batch has run, and the typed load error on drivers without the calls.

use cuda_tests::{TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing, hold, no_deferred};
use cuhost::alloc::MemAttach;
use cuhost::copy::{CopyBatch3D, CopyRegion, CopyRegion3D, Volume};
use cuhost::device::driver_version;
use cuhost::memory::{Array, ArrayDescriptor, ArrayFlags, ManagedBuffer, MemLocation, PitchedBuffer};
use cuhost::{Context, ContextFlags, DeviceBuffer, Error, PinnedBuffer, Stream, StreamFlags};

fn main() {
    cuda_tests::run(&[
        gpu("batches_need_the_driver_version_they_name", batches_need_the_driver_version_they_name),
        gpu_needing(
            "many_small_device_to_device_copies_in_one_batch",
            copy_batch_driver,
            many_small_device_to_device_copies,
        ),
        gpu_needing(
            "pinned_and_device_copies_mixed_in_batches",
            copy_batch_driver,
            pinned_and_device_copies_mixed,
        ),
        gpu_needing("pageable_host_slices_through_the_unsafe_forms", copy_batch_driver, pageable_host_slices),
        gpu_needing(
            "bad_batched_copies_are_refused_before_any_call",
            copy_batch_driver,
            bad_copies_are_refused,
        ),
        gpu_needing(
            "a_source_dropped_right_after_submit_is_freed_after_the_batch",
            copy_batch_driver,
            source_dropped_after_submit,
        ),
        gpu_needing(
            "a_pinned_destination_is_read_only_after_the_batch",
            copy_batch_driver,
            pinned_destination_waits_for_the_batch,
        ),
        gpu_needing(
            "batched_3d_copies_of_sub_boxes_between_pitched_pinned_array_and_device",
            copy_batch_driver,
            batched_3d_copies_of_sub_boxes,
        ),
        gpu_needing(
            "bad_batched_3d_copies_are_refused_before_any_call",
            copy_batch_driver,
            bad_3d_copies_are_refused,
        ),
        gpu_needing(
            "prefetch_batch_moves_managed_ranges",
            managed_batch_support,
            prefetch_batch_moves_ranges,
        ),
        gpu_needing(
            "discard_batches_leave_managed_memory_usable",
            managed_batch_support,
            discard_batches_leave_memory_usable,
        ),
    ])
}

/// Elements of the buffers of the drop tests: 64 MiB of `u32`, so that a late copy shows.
const N: usize = 1 << 24;

fn copy_batch_driver() -> Result<(), String> {
    match driver_version() {
        Ok(v) if v >= 12080 => Ok(()),
        Ok(v) => Err(format!("cuMemcpyBatchAsync needs a CUDA 12.8 driver; this one is {v}")),
        Err(e) => Err(e.to_string()),
    }
}

fn managed_batch_support() -> Result<(), String> {
    let driver = driver_version().map_err(|e| e.to_string())?;
    if driver < 13000 {
        return Err(format!("the managed-memory batches need a CUDA 13.0 driver; this one is {driver}"));
    }
    let count = cuhost::Device::count().map_err(|e| e.to_string())?;
    for i in 0..count {
        let device = cuhost::Device::get(i).map_err(|e| e.to_string())?;
        if !device.concurrent_managed_access().map_err(|e| e.to_string())? {
            return Err(format!("device {i} lacks concurrent managed access, which the batches need"));
        }
    }
    Ok(())
}

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) -> TestResult {
    match r {
        Err(Error::InvalidArgument { message, .. }) => {
            ensure!(!message.is_empty(), "{what}: empty message");
            Ok(())
        }
        other => Err(format!("{what}: expected InvalidArgument, got {other:?}").into()),
    }
}

/// Below CUDA 12.8 a copy batch is a load error naming the versions; below 13.0 so are the
/// managed batches; from there on they are made.
fn batches_need_the_driver_version_they_name() -> TestResult {
    let (_device, _ctx, s) = device_zero()?;
    let driver = driver_version()?;
    let load = |r: Result<(), Error>, needs: i32, what: &str| -> TestResult {
        match r {
            Ok(()) => ensure!(driver >= needs, "{what} was made on driver {driver}"),
            Err(Error::Load { call, source }) => {
                ensure!(driver < needs, "{what} refused on driver {driver}: {source}");
                ensure!(call.starts_with("cuMem"), "{what}: the error names {call}");
            }
            Err(e) => return Err(format!("{what}: expected a load error or a batch, got {e}").into()),
        }
        Ok(())
    };
    load(s.copy_batch().map(drop), 12080, "a copy batch")?;
    load(s.copy_batch_3d().map(drop), 12080, "a 3D copy batch")?;
    load(s.prefetch_batch().map(drop), 13000, "a prefetch batch")?;
    load(s.discard_batch().map(drop), 13000, "a discard batch")?;
    load(s.discard_and_prefetch_batch().map(drop), 13000, "a discard-and-prefetch batch")?;
    Ok(())
}

/// 1,000 copies of 64 `u32`s between two device buffers, in a shuffled order of regions,
/// plus whole-buffer copies of other element types in the same batch.
fn many_small_device_to_device_copies() -> TestResult {
    let (_device, ctx, s) = device_zero()?;
    let blocks = 1000;
    let block = 64;
    let input: Vec<u32> = (0..(blocks * block) as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let src = DeviceBuffer::from_slice(&s, &input)?;
    let mut dst = DeviceBuffer::<u32>::zeroed(&s, blocks * block)?;
    let bytes: Vec<u8> = (0..4099).map(|i| (i * 7) as u8).collect();
    let small_src = DeviceBuffer::from_slice(&s, &bytes)?;
    let mut small_dst = DeviceBuffer::<u8>::zeroed(&s, bytes.len())?;
    let floats: Vec<f64> = (0..333).map(|i| f64::from(i) * 0.5).collect();
    let float_src = DeviceBuffer::from_slice(&s, &floats)?;
    let mut float_dst = DeviceBuffer::<f64>::zeroed(&s, floats.len())?;
    // Block i of the destination takes block (i * 7) % blocks of the source: 7 and 1000 are
    // coprime, so every source block is read once.
    let source_block = |i: usize| (i * 7) % blocks;
    let mut batch = s.copy_batch()?;
    batch.reserve(blocks + 2);
    batch.copy_regions(
        &mut dst,
        &src,
        (0..blocks).map(|i| CopyRegion::of(block).from(source_block(i) * block).to(i * block)),
    )?;
    batch.copy(&mut small_dst, &small_src)?.copy(float_dst.view_mut(), float_src.view())?;
    ensure_eq!(batch.len(), blocks + 2);
    batch.submit()?;
    s.synchronize()?;
    let seen = dst.to_vec()?;
    for i in 0..blocks {
        for j in 0..block {
            let (got, want) = (seen[i * block + j], input[source_block(i) * block + j]);
            ensure!(got == want, "element {j} of block {i}: {got:#x}, expected {want:#x}");
        }
    }
    ensure!(small_dst.to_vec()? == bytes, "the u8 buffer of an odd length was copied whole");
    ensure!(float_dst.to_vec()? == floats, "the f64 buffer was copied whole");
    // Buffers on the batch's own stream note nothing.
    ensure!(src.recorded_streams().is_empty() && dst.recorded_streams().is_empty(), "own stream noted");
    no_deferred(&ctx)
}

/// Host (pinned) to device, device to device and device to pinned chunks in batches on a
/// stream other than the buffers': every element lands, and every buffer notes the stream.
fn pinned_and_device_copies_mixed() -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 1 << 16;
    let input = PinnedBuffer::from_fn(n, |i| (i as u32) ^ 0x5a5a_0000)?;
    let mut a = DeviceBuffer::<u32>::zeroed(&owner, n)?;
    let mut b = DeviceBuffer::<u32>::zeroed(&owner, n)?;
    owner.synchronize()?;
    // Host to device: 256 regions reversed, from pinned memory.
    let block = n / 256;
    let mut up = side.copy_batch()?;
    up.copy_regions(
        &mut a,
        &input,
        (0..256).map(|i| CopyRegion::of(block).from((255 - i) * block).to(i * block)),
    )?;
    up.submit()?;
    // Device to device, whole, in a second batch on the same stream (ordered after the first).
    let mut across = side.copy_batch()?;
    across.copy(&mut b, &a)?;
    across.submit()?;
    // Device to pinned: into the four chunks of one staging buffer, and into a whole buffer.
    let mut staging = PinnedBuffer::<u32>::new(n)?;
    let mut whole = PinnedBuffer::<u32>::new(n)?;
    {
        let mut chunks = staging.chunks_mut(n / 4)?;
        let mut down = side.copy_batch()?;
        for chunk in &mut chunks {
            let range = chunk.offset()..chunk.offset() + chunk.len();
            down.copy(chunk, b.slice(range)?)?;
        }
        down.copy(&mut whole, &a)?;
        down.submit()?;
        let host = input.as_slice()?;
        let expected: Vec<u32> = (0..n).map(|i| host[(255 - i / block) * block + i % block]).collect();
        for chunk in &chunks {
            let at = chunk.offset();
            // Waits for the batch that writes the chunk.
            let seen = chunk.as_slice()?;
            ensure!(seen == &expected[at..at + seen.len()], "chunk at {at} holds what the batches copied");
        }
        ensure!(
            whole.as_slice()? == expected.as_slice(),
            "the whole pinned buffer holds what the batches copied"
        );
    }
    ensure!(staging.as_slice()?.len() == n, "the staging buffer is whole again");
    for (name, noted) in [("a", a.recorded_streams()), ("b", b.recorded_streams())] {
        ensure!(noted.contains(&side), "buffer {name} did not note the batch's stream");
    }
    side.synchronize()?;
    no_deferred(&ctx)
}

/// Pageable `Vec`s in and out through `copy_from_host` and `copy_to_host`, kept alive and
/// untouched until the stream is synchronized, as their contract asks.
fn pageable_host_slices() -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let pageable: Vec<u64> = (0..10_000u64).map(|i| i * i).collect();
    let mut landed = DeviceBuffer::<u64>::zeroed(&owner, pageable.len())?;
    owner.synchronize()?;
    let mut back = vec![0u64; pageable.len()];
    let mut up = side.copy_batch()?;
    // SAFETY: `pageable` lives, unchanged, until the synchronize below.
    unsafe { up.copy_from_host(&mut landed, &pageable)? };
    up.submit()?;
    let mut down = side.copy_batch()?;
    // SAFETY: `back` lives, untouched, until the synchronize below.
    unsafe { down.copy_to_host(&mut back, &landed)? };
    down.submit()?;
    side.synchronize()?;
    ensure!(back == pageable, "the pageable round trip differs");
    no_deferred(&ctx)
}

/// Length mismatches, regions past the end, overlapping destination regions and the legacy
/// stream are typed errors; a refused add leaves the batch (and the buffers' noted streams)
/// as they were, and what was added before still copies. (An add borrows its operands until
/// the batch is gone, refused or not, so each refusal below has a batch of its own.)
fn bad_copies_are_refused() -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    invalid(Stream::legacy(&ctx).copy_batch(), "a batch on the legacy default stream")?;
    let src = DeviceBuffer::from_slice(&owner, &(0..100u32).collect::<Vec<_>>())?;
    let mut dst = DeviceBuffer::<u32>::zeroed(&owner, 100)?;
    let mut short = DeviceBuffer::<u32>::zeroed(&owner, 99)?;
    let pinned = PinnedBuffer::<u32>::new(101)?;
    owner.synchronize()?;
    let added = |r: Result<&mut cuhost::copy::CopyBatch<'_>, Error>| r.map(|b| b.len());
    invalid(added(side.copy_batch()?.copy(&mut short, &src)), "lengths 99 and 100")?;
    invalid(added(side.copy_batch()?.copy(&mut dst, &pinned)), "lengths 100 and 101 (pinned)")?;
    invalid(
        added(side.copy_batch()?.copy_regions(
            &mut dst,
            &src,
            [CopyRegion::of(10).from(0).to(0), CopyRegion::of(6).from(0).to(95)],
        )),
        "a destination region past the end",
    )?;
    invalid(
        added(side.copy_batch()?.copy_regions(&mut dst, &src, [CopyRegion::of(10).from(91).to(0)])),
        "a source region past the end",
    )?;
    invalid(
        added(side.copy_batch()?.copy_regions(&mut dst, &src, [CopyRegion::of(2).from(0).to(usize::MAX)])),
        "an offset that overflows",
    )?;
    let overlapping = [
        CopyRegion::of(10).from(0).to(50),
        CopyRegion::of(10).from(10).to(0),
        CopyRegion::of(10).from(20).to(55),
    ];
    invalid(
        added(side.copy_batch()?.copy_regions(&mut dst, &src, overlapping)),
        "overlapping destination regions",
    )?;
    ensure!(
        src.recorded_streams().is_empty() && dst.recorded_streams().is_empty(),
        "a refused add noted the batch's stream on a buffer"
    );
    // One batch: copies added, then refused ones (of other buffers), then submitted. Regions
    // of no elements are left out; source regions may overlap.
    let lonely = DeviceBuffer::<u32>::zeroed(&owner, 100)?;
    let mut batch = side.copy_batch()?;
    batch.copy_regions(
        &mut dst,
        &src,
        [
            CopyRegion::of(0).from(0).to(0),
            CopyRegion::of(50).from(10).to(0),
            CopyRegion::of(50).from(0).to(50),
        ],
    )?;
    ensure_eq!(batch.len(), 2);
    invalid(batch.copy(&mut short, &lonely), "lengths 99 and 100 in a batch with copies")?;
    ensure_eq!(batch.len(), 2, "a refused add changed the batch");
    ensure!(lonely.recorded_streams().is_empty(), "a refused add noted the batch's stream");
    batch.submit()?;
    side.synchronize()?;
    let seen = dst.to_vec()?;
    let expected: Vec<u32> = (10..60).chain(0..50).collect();
    ensure!(seen == expected, "the copies added before the refusal: {:?}", &seen[..8]);
    // An empty batch submits without a call.
    side.copy_batch()?.submit()?;
    no_deferred(&ctx)
}

// 3D batches (`CopyBatch3D`).

/// The extent of the volumes of the 3D batch tests: 8 × 6 × 4 elements.
const X: usize = 8;
const Y: usize = 6;
const Z: usize = 4;
/// The extent of the pinned volume of the 3D batch tests: 5 × 4 × 3 elements.
const HX: usize = 5;
const HY: usize = 4;
const HZ: usize = 3;

fn u32_array(ctx: &Context, [width, height, depth]: [usize; 3]) -> Result<Array, Error> {
    let format = cuhost_driver_sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32;
    Array::new(
        ctx,
        &ArrayDescriptor { width, height, depth, format, num_channels: 1, flags: ArrayFlags::empty() },
    )
}

/// Copies, on the host, the box of `extent` at `from` in `src` to `to` in `dst`; both are dense
/// volumes with rows of `layout[0]` elements and layers of `layout[1]` rows.
fn place(
    dst: &mut [u32],
    dst_layout: [usize; 2],
    to: [usize; 3],
    src: &[u32],
    src_layout: [usize; 2],
    from: [usize; 3],
    extent: [usize; 3],
) {
    let index = |layout: [usize; 2], at: [usize; 3]| (at[2] * layout[1] + at[1]) * layout[0] + at[0];
    for z in 0..extent[2] {
        for y in 0..extent[1] {
            for x in 0..extent[0] {
                dst[index(dst_layout, [to[0] + x, to[1] + y, to[2] + z])] =
                    src[index(src_layout, [from[0] + x, from[1] + y, from[2] + z])];
            }
        }
    }
}

/// A pitched 3D volume (rows padded past their 8 elements, layers of 6 rows) copied in boxes,
/// in one batch on a stream held back and other than the buffers', to a pinned volume of
/// other extents, into an array (two boxes) and whole into dense device memory; then, in a
/// second batch, the array whole into pinned memory and a box of the pinned volume back into
/// the pitched buffer seen as one 2D layer. Every element lands where the boxes say, the pinned
/// destination waits for its batch, and the device buffers note the batch's stream.
fn batched_3d_copies_of_sub_boxes() -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let whole = [X, Y, Z];
    let values: Vec<u32> =
        (0..(X * Y * Z) as u32).map(|i| i.wrapping_mul(2_654_435_761) ^ 0x00a5_0000).collect();
    let mut volume = PitchedBuffer::<u32>::new(&owner, X, Y * Z)?;
    ensure!(volume.pitch() > X * 4, "the rows are not padded (pitch {})", volume.pitch());
    volume.copy_from_host(&values)?;
    let mut array = u32_array(&ctx, whole)?;
    array.copy_from_host(&vec![0u32; X * Y * Z])?;
    let mut host = PinnedBuffer::from_fn(HX * HY * HZ, |_| u32::MAX)?;
    let mut dense = DeviceBuffer::<u32>::zeroed(&owner, X * Y * Z)?;
    owner.synchronize()?;

    hold(&side, 100)?;
    let to_host = CopyRegion3D::of([3, 2, 2]).from([2, 1, 1]).to([1, 1, 1]);
    let to_array = [
        CopyRegion3D::of([4, 3, 2]).from([0, 0, 0]).to([4, 3, 2]),
        CopyRegion3D::of([3, 4, 1]).from([5, 2, 1]).to([0, 0, 0]),
    ];
    let mut batch = side.copy_batch_3d()?;
    batch.copy_regions(Volume::new(&mut host, [HX, HY, HZ]), Volume::new(&volume, whole), [to_host])?;
    batch.copy_regions(&mut array, Volume::new(&volume, whole), to_array)?;
    batch.copy(Volume::new(&mut dense, whole), Volume::new(&volume, whole))?;
    ensure_eq!(batch.len(), 4);
    batch.submit()?;
    ensure!(host.has_copies_in_flight(), "the pinned destination did not record the batch");
    let mut want_host = vec![u32::MAX; HX * HY * HZ];
    let r = to_host;
    place(&mut want_host, [HX, HY], r.dst_offset, &values, [X, Y], r.src_offset, r.extent);
    // Waits for the batch, on a stream held back when it was submitted.
    ensure!(host.as_slice()? == want_host.as_slice(), "the pinned volume: {:?}", host.as_slice()?);
    side.synchronize()?;
    let mut want_array = vec![0u32; X * Y * Z];
    for r in to_array {
        place(&mut want_array, [X, Y], r.dst_offset, &values, [X, Y], r.src_offset, r.extent);
    }
    let mut seen = vec![0u32; X * Y * Z];
    array.copy_to_host(&mut seen)?;
    ensure!(seen == want_array, "the array: {seen:?}");
    ensure!(dense.to_vec()? == values, "the dense copy of the whole volume");
    ensure!(
        volume.storage().recorded_streams().contains(&side),
        "the pitched source did not note the stream"
    );
    ensure!(dense.recorded_streams().contains(&side), "the dense destination did not note the stream");

    // Back: the array whole into pinned memory, and the first layer of the pinned volume into
    // the pitched buffer, seen as its 8 × 24 rows.
    let mut back = PinnedBuffer::<u32>::new(X * Y * Z)?;
    let mut batch = side.copy_batch_3d()?;
    batch.copy(Volume::new(&mut back, whole), &array)?;
    batch.copy_regions(
        &mut volume,
        Volume::new(&host, [HX, HY, HZ]),
        [CopyRegion3D::of([HX, HY, 1]).from([0; 3]).to([2, 7, 0])],
    )?;
    batch.submit()?;
    ensure!(back.as_slice()? == want_array.as_slice(), "the array copied whole into pinned memory");
    side.synchronize()?;
    volume.copy_to_host(&mut seen)?;
    let mut want_volume = values.clone();
    place(&mut want_volume, [X, Y * Z], [2, 7, 0], &want_host, [HX, HY], [0; 3], [HX, HY, 1]);
    ensure!(seen == want_volume, "the pitched buffer after the box from the pinned volume: {seen:?}");
    no_deferred(&ctx)
}

/// Boxes past either side, offsets that overflow, volumes whose extent does not match their
/// memory, an element type of another size than the array's, whole copies of different
/// extents, overlapping destination boxes, an array of another context and the legacy stream
/// are typed errors; a refused add leaves the batch and the buffers' noted streams as they were,
/// and what was added before still copies. An empty batch submits without a call.
fn bad_3d_copies_are_refused() -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    invalid(Stream::legacy(&ctx).copy_batch_3d(), "a 3D batch on the legacy default stream")?;
    let whole = [X, Y, Z];
    let values: Vec<u32> = (0..(X * Y * Z) as u32).collect();
    let src = DeviceBuffer::from_slice(&owner, &values)?;
    let narrow = DeviceBuffer::<u16>::zeroed(&owner, X * Y * Z)?;
    let mut dst = DeviceBuffer::<u32>::zeroed(&owner, X * Y * Z)?;
    let mut pitched = PitchedBuffer::<u32>::new(&owner, X, Y * Z)?;
    let mut array = u32_array(&ctx, whole)?;
    let pinned = PinnedBuffer::<u32>::new(X * Y * Z)?;
    let other = Context::create(&ctx.device(), ContextFlags::empty())?;
    let mut foreign = u32_array(&other, whole)?;
    owner.synchronize()?;
    let added = |r: Result<&mut CopyBatch3D<'_>, Error>| r.map(|b| b.len());
    let one = |to, from, extent| [CopyRegion3D::of(extent).from(from).to(to)];
    let boxes = [
        (one([6, 0, 0], [0; 3], [3, 1, 1]), "a destination box past the width"),
        (one([0; 3], [0, 5, 0], [1, 2, 1]), "a source box past the height"),
        (one([0; 3], [0, 0, 3], [1, 1, 2]), "a source box past the depth"),
        (one([usize::MAX, 0, 0], [0; 3], [2, 1, 1]), "an offset that overflows"),
    ];
    for (regions, what) in boxes {
        invalid(
            added(side.copy_batch_3d()?.copy_regions(
                Volume::new(&mut dst, whole),
                Volume::new(&src, whole),
                regions,
            )),
            what,
        )?;
    }
    let overlapping = [
        CopyRegion3D::of([4, 4, 2]).from([0; 3]).to([0; 3]),
        CopyRegion3D::of([2, 2, 2]).from([4, 0, 0]).to([3, 3, 1]),
    ];
    invalid(
        added(side.copy_batch_3d()?.copy_regions(
            Volume::new(&mut dst, whole),
            Volume::new(&src, whole),
            overlapping,
        )),
        "overlapping destination boxes",
    )?;
    let everything = one([0; 3], [0; 3], whole);
    invalid(
        added(side.copy_batch_3d()?.copy_regions(
            Volume::new(&mut dst, whole),
            Volume::new(&src, [X, Y, Z + 1]),
            everything,
        )),
        "a volume larger than its device memory",
    )?;
    invalid(
        added(side.copy_batch_3d()?.copy_regions(
            Volume::new(&mut dst, whole),
            Volume::new(&pinned, [X, Y, Z - 1]),
            one([0; 3], [0; 3], [1, 1, 1]),
        )),
        "a volume smaller than its pinned memory",
    )?;
    invalid(
        added(side.copy_batch_3d()?.copy(Volume::new(&mut dst, whole), Volume::new(&pitched, [X, 5, 5]))),
        "a pitched volume of 25 rows over 24",
    )?;
    invalid(
        added(
            side.copy_batch_3d()?
                .copy(Volume::new(&mut pitched, [X - 1, Y, Z]), Volume::new(&src, [X - 1, Y, Z])),
        ),
        "a pitched volume narrower than its rows",
    )?;
    invalid(
        added(side.copy_batch_3d()?.copy(&mut array, Volume::new(&narrow, whole))),
        "u16 elements for an array of u32",
    )?;
    invalid(
        added(side.copy_batch_3d()?.copy(Volume::new(&mut dst, whole), Volume::new(&src, [X * Y, Z, 1]))),
        "whole copies of different extents",
    )?;
    invalid(
        added(side.copy_batch_3d()?.copy(&mut foreign, Volume::new(&src, whole))),
        "an array of another context",
    )?;
    ensure!(
        src.recorded_streams().is_empty() && dst.recorded_streams().is_empty(),
        "a refused add noted the batch's stream on a buffer"
    );
    ensure!(pitched.storage().recorded_streams().is_empty(), "a refused add noted the batch's stream");

    // One batch: a copy added (a box of no depth left out), then a refused one of other
    // buffers, then submitted.
    let lonely = DeviceBuffer::<u32>::zeroed(&owner, X * Y * Z)?;
    owner.synchronize()?;
    let mut batch = side.copy_batch_3d()?;
    batch.copy_regions(
        Volume::new(&mut dst, whole),
        Volume::new(&src, whole),
        [
            CopyRegion3D::of([X, Y, 0]).from([0; 3]).to([0; 3]),
            CopyRegion3D::of([X, Y, Z - 1]).from([0, 0, 1]).to([0; 3]),
        ],
    )?;
    ensure_eq!(batch.len(), 1);
    invalid(
        batch
            .copy_regions(&mut pitched, Volume::new(&lonely, whole), one([0; 3], [0; 3], [X + 1, 1, 1]))
            .map(|b| b.len()),
        "a box past a pitched buffer in a batch with copies",
    )?;
    ensure_eq!(batch.len(), 1, "a refused add changed the batch");
    ensure!(lonely.recorded_streams().is_empty(), "a refused add noted the batch's stream");
    batch.submit()?;
    side.synchronize()?;
    let mut expected = values[X * Y..].to_vec();
    expected.resize(X * Y * Z, 0);
    ensure!(dst.to_vec()? == expected, "the copy added before the refusal");
    // An empty batch submits without a call.
    side.copy_batch_3d()?.submit()?;
    no_deferred(&ctx)
}

/// The pool hands a dropped block straight back on its stream (what would make a late copy
/// read the next buffer's memory).
fn pool_reuses_blocks(stream: &Stream) -> TestResult {
    let first = DeviceBuffer::<u32>::new(stream, N)?;
    let address = first.as_raw();
    drop(first);
    let again = DeviceBuffer::<u32>::new(stream, N)?;
    ensure_eq!(again.as_raw(), address, "the pool did not hand the same block back");
    Ok(())
}

/// A device source and a pinned source, each dropped right after the batch that reads them is
/// submitted on a stream held back, then successors of the same size taken (the pools would
/// hand the same blocks back) and filled: the batch must still copy the old contents.
fn source_dropped_after_submit() -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let late = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    pool_reuses_blocks(&owner)?;
    let source = DeviceBuffer::<u32>::from_slice(&owner, &vec![5; N])?;
    let host_source = PinnedBuffer::from_fn(N, |_| 6u32)?;
    let mut from_device = DeviceBuffer::<u32>::zeroed(&owner, N)?;
    let mut from_host = DeviceBuffer::<u32>::zeroed(&owner, N)?;
    owner.synchronize()?;
    hold(&late, 300)?;
    let mut batch = late.copy_batch()?;
    batch.copy_regions(
        &mut from_device,
        &source,
        (0..16).map(|i| CopyRegion::of(N / 16).from(i * (N / 16)).to(i * (N / 16))),
    )?;
    batch.copy(&mut from_host, &host_source)?;
    ensure_eq!(source.recorded_streams().len(), 1, "the batch did not note its stream on the source");
    batch.submit()?;
    drop(source);
    drop(host_source);
    let successor = DeviceBuffer::<u32>::from_slice(&owner, &vec![7; N])?;
    let host_successor = PinnedBuffer::from_fn(N, |_| 8u32)?;
    late.synchronize()?;
    let wrong = from_device.to_vec()?.iter().filter(|&&v| v != 5).count();
    ensure_eq!(wrong, 0, "words the batch copied from another buffer than its dropped device source");
    let wrong = from_host.to_vec()?.iter().filter(|&&v| v != 6).count();
    ensure_eq!(wrong, 0, "words the batch copied from another buffer than its dropped pinned source");
    ensure!(successor.to_vec()?.iter().all(|&v| v == 7), "the device successor changed");
    ensure!(host_successor.as_slice()?.iter().all(|&v| v == 8), "the pinned successor changed");
    no_deferred(&ctx)
}

/// A pinned destination of a batch on a held stream: reading it waits for the batch, and a
/// destination dropped right after the submit is not handed out again before the batch is done.
fn pinned_destination_waits_for_the_batch() -> TestResult {
    let (_device, ctx, s) = device_zero()?;
    let n = 1 << 20;
    let data: Vec<u32> = (0..n as u32).collect();
    let device = DeviceBuffer::from_slice(&s, &data)?;
    let mut out = PinnedBuffer::<u32>::new(n)?;
    hold(&s, 200)?;
    let mut batch = s.copy_batch()?;
    batch.copy(&mut out, &device)?;
    batch.submit()?;
    ensure!(out.has_copies_in_flight(), "the pinned destination did not record the batch");
    ensure!(out.as_slice()? == data.as_slice(), "as_slice read the buffer before the batch wrote it");
    // Dropped with the batch in flight: the pinned pool keeps the block until it is done.
    let mut doomed = PinnedBuffer::<u32>::new(n)?;
    hold(&s, 200)?;
    let mut batch = s.copy_batch()?;
    batch.copy(&mut doomed, &device)?;
    batch.submit()?;
    drop(doomed);
    let next = PinnedBuffer::from_fn(n, |_| 3u32)?;
    s.synchronize()?;
    ensure!(next.as_slice()?.iter().all(|&v| v == 3), "the batch wrote into the next pinned buffer");
    no_deferred(&ctx)
}

fn managed_with(stream: &Stream, n: usize, f: impl Fn(usize) -> u32) -> Result<ManagedBuffer<u32>, Error> {
    let mut m = ManagedBuffer::<u32>::new_managed(stream, n, MemAttach::Global)?;
    let data: Vec<u32> = (0..n).map(f).collect();
    m.copy_from_device(&DeviceBuffer::from_slice(stream, &data)?)?;
    Ok(m)
}

/// Two buffers prefetched whole, one to the device and one to the host, and a third in two
/// halves to different places, by one batch on a stream other than theirs: the driver reports
/// the last prefetch location of the first two, and every buffer keeps its contents.
fn prefetch_batch_moves_ranges() -> TestResult {
    let (device, ctx, owner) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 1 << 20;
    let to_device = managed_with(&owner, n, |i| i as u32)?;
    let to_host = managed_with(&owner, n, |i| !(i as u32))?;
    let split = managed_with(&owner, n, |i| (i as u32) << 1)?;
    let mut batch = side.prefetch_batch()?;
    batch
        .prefetch(&to_device, .., MemLocation::Device(device))?
        .prefetch(&to_host, .., MemLocation::Host)?
        .prefetch(&split, ..n / 2, MemLocation::Host)?
        .prefetch(&split, n / 2.., MemLocation::Device(device))?;
    invalid(batch.prefetch(&split, n..=n, MemLocation::Host), "a range past the end")?;
    ensure_eq!(batch.len(), 4);
    batch.submit()?;
    for (name, buffer) in [("to_device", &to_device), ("to_host", &to_host), ("split", &split)] {
        ensure!(buffer.recorded_streams().contains(&side), "{name} did not note the batch's stream");
    }
    side.synchronize()?;
    ensure_eq!(to_device.last_prefetch_location()?, Some(MemLocation::Device(device)));
    ensure_eq!(to_host.last_prefetch_location()?, Some(MemLocation::Host));
    ensure!(to_device.to_vec()?.iter().enumerate().all(|(i, &v)| v == i as u32), "to_device changed");
    ensure!(to_host.to_vec()?.iter().enumerate().all(|(i, &v)| v == !(i as u32)), "to_host changed");
    ensure!(split.to_vec()?.iter().enumerate().all(|(i, &v)| v == (i as u32) << 1), "split changed");
    invalid(Stream::legacy(&ctx).prefetch_batch(), "a prefetch batch on the legacy default stream")?;
    no_deferred(&ctx)
}

/// Discarding (whole, and in disjoint ranges) and discarding with a prefetch to the device:
/// overlapping or out-of-bounds ranges are refused; the buffers note the stream, the
/// prefetched one reports the device as its last prefetch location, and all of them hold
/// what is written into them afterwards.
fn discard_batches_leave_memory_usable() -> TestResult {
    let (device, ctx, owner) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // 8 MiB each, the ranges on 2 MiB boundaries: whole pages of any size the driver uses.
    let n = 1 << 21;
    let mut whole = managed_with(&owner, n, |i| i as u32)?;
    let mut parts = managed_with(&owner, n, |i| i as u32)?;
    let mut moved = managed_with(&owner, n, |i| i as u32)?;
    // Refusals, each in a batch of its own (an add borrows the buffer until the batch is gone).
    let ranges = |r: Result<&mut cuhost::copy::DiscardBatch<'_>, Error>| r.map(|b| b.len());
    // SAFETY (every discard below): the buffers are next used after `side.synchronize()`.
    invalid(
        unsafe { ranges(side.discard_batch()?.discard(&mut parts, [0..100, 50..150])) },
        "overlapping discard ranges",
    )?;
    invalid(
        unsafe { ranges(side.discard_batch()?.discard(&mut parts, std::iter::once(0..n + 1))) },
        "a discard range past the end",
    )?;
    invalid(
        unsafe {
            side.discard_and_prefetch_batch()?
                .discard_and_prefetch(&mut moved, [0..10, 9..20], MemLocation::Device(device))
                .map(|b| b.len())
        },
        "overlapping discard-and-prefetch ranges",
    )?;
    ensure!(parts.recorded_streams().is_empty(), "a refused discard noted the batch's stream");
    let mut discard = side.discard_batch()?;
    unsafe {
        discard.discard(&mut whole, [..])?;
        discard.discard(&mut parts, [0..n / 4, n / 2..n])?;
    }
    ensure_eq!(discard.len(), 3);
    discard.submit()?;
    let mut batch = side.discard_and_prefetch_batch()?;
    unsafe { batch.discard_and_prefetch(&mut moved, [..], MemLocation::Device(device))? };
    batch.submit()?;
    for (name, buffer) in [("whole", &whole), ("parts", &parts), ("moved", &moved)] {
        ensure!(buffer.recorded_streams().contains(&side), "{name} did not note the batch's stream");
    }
    side.synchronize()?;
    ensure_eq!(moved.last_prefetch_location()?, Some(MemLocation::Device(device)));
    // The part of `parts` that was not discarded keeps its contents.
    let kept = parts.slice(n / 4..n / 2)?.to_vec()?;
    ensure!(kept.iter().enumerate().all(|(i, &v)| v == (n / 4 + i) as u32), "an undiscarded range changed");
    let fresh: Vec<u32> = (0..n as u32).map(|i| i ^ 0xffff).collect();
    for buffer in [&mut whole, &mut parts, &mut moved] {
        buffer.copy_from_device(&DeviceBuffer::from_slice(&owner, &fresh)?)?;
        ensure!(buffer.to_vec()? == fresh, "a discarded buffer does not hold what was written into it");
    }
    no_deferred(&ctx)
}
