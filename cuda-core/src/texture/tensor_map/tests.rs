//! The checks of the tensor map builder, on made-up addresses: every mistake is refused
//! before the driver is called, naming the field.

use super::*;
use crate::context::Context;

/// A view of `len` f32 at `address`; never used to touch memory.
fn view(ctx: &Context, address: u64, len: usize) -> DeviceView<'_, f32> {
    // SAFETY: the view is only described, never read or written.
    unsafe { DeviceView::from_raw(ctx, address, len) }
}

fn refused(r: Result<TensorMap<'_>>) -> String {
    match r {
        Err(crate::error::Error::InvalidArgument { message, .. }) => message,
        other => panic!("expected an InvalidArgument, got {other:?}"),
    }
}

/// A 64 × 64 f32 matrix, rows 256 bytes apart.
fn matrix(ctx: &Context) -> TensorMapBuilder<'_> {
    TensorMapBuilder::new(view(ctx, 0x10_0000, 64 * 64), TensorDataType::Float32)
        .global_dims(&[64, 64])
        .global_strides(&[256])
}

#[test]
fn rank_and_dimensions_are_checked() {
    let ctx = Context::detached_for_tests();
    let none = TensorMapBuilder::new(view(&ctx, 0x10_0000, 64), TensorDataType::Float32);
    assert!(refused(none.tiled(&[])).contains("`global_dims` has 0 dimensions"));
    let six = none.clone().global_dims(&[1; 6]).global_strides(&[16; 5]);
    assert!(refused(six.tiled(&[4; 6])).contains("takes 1 to 5"));
    let interleaved = matrix(&ctx).interleave(Interleave::Bytes16);
    assert!(refused(interleaved.tiled(&[4, 4])).contains("interleaved layouts need at least 3"));
    let zero = matrix(&ctx).global_dims(&[64, 0]);
    assert!(refused(zero.tiled(&[4, 4])).contains("`global_dims[1]` is 0"));
    let im2col = matrix(&ctx);
    assert!(refused(im2col.im2col(&[], &[], 4, 4)).contains("takes 3 to 5"));
}

#[test]
fn strides_must_be_aligned_and_growing() {
    let ctx = Context::detached_for_tests();
    assert!(
        refused(matrix(&ctx).global_strides(&[]).tiled(&[4, 4])).contains("`global_strides` has 0 entries")
    );
    assert!(
        refused(matrix(&ctx).global_strides(&[260]).tiled(&[4, 4])).contains("`global_strides[0]` is 260")
    );
    let overlapping = matrix(&ctx).global_strides(&[128]);
    assert!(refused(overlapping.tiled(&[4, 4])).contains("must grow"));
    let cube = TensorMapBuilder::new(view(&ctx, 0x10_0000, 1 << 16), TensorDataType::Float32)
        .global_dims(&[16, 16, 16])
        .global_strides(&[64, 512]);
    assert!(
        refused(cube.tiled(&[4, 4, 4]))
            .contains("`global_strides[1]` is 512 bytes but the dimensions inside it take 1024")
    );
    let beyond = matrix(&ctx).global_strides(&[1 << 40]);
    assert!(refused(beyond.tiled(&[4, 4])).contains("below 2^40"));
}

#[test]
fn the_tensor_must_fit_the_view_and_its_type() {
    let ctx = Context::detached_for_tests();
    let small = TensorMapBuilder::new(view(&ctx, 0x10_0000, 64 * 63), TensorDataType::Float32)
        .global_dims(&[64, 64])
        .global_strides(&[256]);
    assert!(refused(small.tiled(&[4, 4])).contains("reaches 16384 bytes"));
    let halves = TensorMapBuilder::new(view(&ctx, 0x10_0000, 64 * 64), TensorDataType::Float16)
        .global_dims(&[64, 64])
        .global_strides(&[256]);
    assert!(refused(halves.tiled(&[8, 4])).contains("`data_type` Float16 has 2-byte elements"));
    let misaligned = TensorMapBuilder::new(view(&ctx, 0x10_0008, 64 * 64), TensorDataType::Float32)
        .global_dims(&[64, 64])
        .global_strides(&[256]);
    assert!(refused(misaligned.tiled(&[4, 4])).contains("`global_address` 0x100008 is not 16-byte aligned"));
    let nan = TensorMapBuilder::new(
        // SAFETY: as in `view`.
        unsafe { DeviceView::<u32>::from_raw(&ctx, 0x10_0000, 64 * 64) },
        TensorDataType::UInt32,
    )
    .global_dims(&[64, 64])
    .global_strides(&[256])
    .oob_fill(OobFill::NanRequestZeroFma);
    assert!(refused(nan.tiled(&[4, 4])).contains("`oob_fill`"));
}

#[test]
fn boxes_element_strides_and_swizzles_are_checked() {
    let ctx = Context::detached_for_tests();
    assert!(refused(matrix(&ctx).tiled(&[4])).contains("`box_dims` has 1 entries"));
    assert!(refused(matrix(&ctx).tiled(&[4, 257])).contains("`box_dims[1]` is 257"));
    assert!(refused(matrix(&ctx).tiled(&[4, 0])).contains("`box_dims[1]` is 0"));
    assert!(refused(matrix(&ctx).tiled(&[2, 4])).contains("`box_dims[0]` spans 8 bytes"));
    let strided = matrix(&ctx).element_strides(&[1, 9]);
    assert!(refused(strided.tiled(&[4, 4])).contains("`element_strides[1]` is 9"));
    assert!(
        refused(matrix(&ctx).element_strides(&[1]).tiled(&[4, 4]))
            .contains("`element_strides` has 1 entries")
    );
    let swizzled = matrix(&ctx).swizzle(Swizzle::Bytes64);
    assert!(refused(swizzled.tiled(&[32, 8])).contains(
        "`swizzle` Bytes64 spans 64 bytes but the inner box dimension (`box_dims[0]`) is 128 bytes"
    ));
}

#[test]
fn im2col_corners_and_counts_are_checked() {
    let ctx = Context::detached_for_tests();
    // NHWC: 8 channels, 8 × 8 pixels, 2 images.
    let nhwc = TensorMapBuilder::new(view(&ctx, 0x10_0000, 8 * 8 * 8 * 2), TensorDataType::Float32)
        .global_dims(&[8, 8, 8, 2])
        .global_strides(&[32, 256, 2048]);
    assert!(refused(nhwc.im2col(&[0], &[0, 0], 8, 16)).contains("`lower_corner` has 1 entries"));
    assert!(
        refused(nhwc.im2col(&[0, 200], &[0, 0], 8, 16))
            .contains("`lower_corner[1]` is 200; a rank-4 tensor takes -128 to 127")
    );
    assert!(refused(nhwc.im2col(&[0, 0], &[0, 0], 0, 16)).contains("`channels_per_pixel` is 0"));
    assert!(refused(nhwc.im2col(&[0, 0], &[0, 0], 8, 2048)).contains("`pixels_per_column` is 2048"));
    let swizzled = nhwc.clone().swizzle(Swizzle::Bytes32);
    assert!(refused(swizzled.im2col(&[0, 0], &[0, 0], 16, 16)).contains("`channels_per_pixel`) is 64 bytes"));
    assert!(
        refused(nhwc.im2col_wide(-200, 0, 8, 16, Im2colWideMode::W)).contains("`lower_corner_width` is -200")
    );
}

#[test]
fn replacing_the_address_checks_size_and_alignment() {
    let ctx = Context::detached_for_tests();
    let map = TensorMap::from_encoded(sys::CUtensorMap::default(), 4096, 16, None);
    let e = map.replace_address(view(&ctx, 0x20_0004, 1024)).unwrap_err().to_string();
    assert!(e.contains("`global_address`"), "{e}");
    let e = map.replace_address(view(&ctx, 0x20_0000, 1023)).unwrap_err().to_string();
    assert!(e.contains("reaches 4096 bytes") && e.contains("holds 4092"), "{e}");
}
