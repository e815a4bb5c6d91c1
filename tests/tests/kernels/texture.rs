//! Hand-written PTX for the texture, surface and tensor map tests.
#![allow(dead_code)]

/// One fetch kernel `name(u64 tex, u64 coords, u64 out, u32 n)`: thread `i < n` loads
/// `words` f32 coordinates (2 or 4) from `coords[words * i]` into `%f1..`, runs `fetch`, which
/// leaves a texel in `%f5..%f8`, and stores it as four f32 at `out[4 * i]`.
fn fetch_entry(name: &str, words: u32, fetch: &str) -> String {
    let load = if words == 2 {
        "ld.global.v2.f32 {%f1, %f2}, [%rd5];"
    } else {
        "ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd5];"
    };
    format!(
        r#"
.visible .entry {name}(
    .param .u64 {name}_tex,
    .param .u64 {name}_coords,
    .param .u64 {name}_out,
    .param .u32 {name}_n
)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<9>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [{name}_tex];
    ld.param.u64 %rd2, [{name}_coords];
    ld.param.u64 %rd3, [{name}_out];
    ld.param.u32 %r1, [{name}_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r2, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra {name}_DONE;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mul.wide.u32 %rd4, %r2, {stride};
    add.s64 %rd5, %rd2, %rd4;
    {load}
    {fetch}
    mul.wide.u32 %rd6, %r2, 16;
    add.s64 %rd7, %rd3, %rd6;
    st.global.v4.f32 [%rd7], {{%f5, %f6, %f7, %f8}};
{name}_DONE:
    ret;
}}
"#,
        stride = words * 4
    )
}

/// The texture kernels, each `(u64 tex, u64 coords, u64 out, u32 n)` writing one float4 per
/// thread:
///
/// * `fetch_2d`: coordinates `(x, y)`, `tex.2d`;
/// * `fetch_3d`: coordinates `(x, y, z, _)`, `tex.3d`;
/// * `fetch_layered`: coordinates `(layer, x, y, _)` (the layer as a float, truncated),
///   `tex.a2d`;
/// * `fetch_level`: coordinates `(x, y, level, _)`, `tex.level.2d`;
/// * `fetch_linear`: coordinates `(index, _)` (the index as a float, truncated), `tex.1d`
///   with an integer coordinate, as for linear memory.
pub fn texture_ptx() -> String {
    let mut ptx = String::from(".version 8.0\n.target sm_70\n.address_size 64\n");
    ptx += &fetch_entry("fetch_2d", 2, "tex.2d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%f1, %f2}];");
    ptx +=
        &fetch_entry("fetch_3d", 4, "tex.3d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%f1, %f2, %f3, %f4}];");
    ptx += &fetch_entry(
        "fetch_layered",
        4,
        "cvt.rzi.u32.f32 %r5, %f1;\n    tex.a2d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%r5, %f2, %f3, %f3}];",
    );
    ptx += &fetch_entry(
        "fetch_level",
        4,
        "tex.level.2d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%f1, %f2}], %f3;",
    );
    ptx += &fetch_entry(
        "fetch_linear",
        2,
        "cvt.rzi.s32.f32 %r5, %f1;\n    tex.1d.v4.f32.s32 {%f5, %f6, %f7, %f8}, [%rd1, {%r5}];",
    );
    ptx
}

/// Surface kernels over a 2D array of u32, one block per row, one thread per texel:
///
/// * `write_surface(u64 surf)`: writes `x + 1000 * y` at texel `(x, y)` (`sust.b`, whose x
///   coordinate is in bytes);
/// * `read_surface(u64 surf, u64 out, u32 width)`: `out[y * width + x] = texel(x, y) + 1`
///   (`suld.b`).
pub const SURFACE_PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .entry write_surface(
    .param .u64 write_surface_surf
)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<2>;

    ld.param.u64 %rd1, [write_surface_surf];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mad.lo.s32 %r3, %r2, 1000, %r1;
    shl.b32 %r4, %r1, 2;
    sust.b.2d.b32.trap [%rd1, {%r4, %r2}], {%r3};
    ret;
}

.visible .entry read_surface(
    .param .u64 read_surface_surf,
    .param .u64 read_surface_out,
    .param .u32 read_surface_width
)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;

    ld.param.u64 %rd1, [read_surface_surf];
    ld.param.u64 %rd2, [read_surface_out];
    ld.param.u32 %r1, [read_surface_width];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    shl.b32 %r4, %r2, 2;
    suld.b.2d.b32.trap {%r5}, [%rd1, {%r4, %r3}];
    add.s32 %r5, %r5, 1;
    mad.lo.s32 %r6, %r3, %r1, %r2;
    cvta.to.global.u64 %rd3, %rd2;
    mul.wide.u32 %rd4, %r6, 4;
    add.s64 %rd5, %rd3, %rd4;
    st.global.u32 [%rd5], %r5;
    ret;
}
"#;

/// `tma_tile(CUtensorMap map, u32 x, u32 y, u64 out)`, one block of 256 threads: thread 0
/// loads the 32 × 8 f32 box at element `(x, y)` into shared memory with
/// `cp.async.bulk.tensor.2d`, completing on an mbarrier that expects its 1024 bytes; every
/// thread waits on the barrier's phase 0 and then copies one word of the shared tile, as it
/// lies there (swizzled, if the map swizzles), to `out[tid]`.
pub const TMA_PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64

.shared .align 1024 .b8 tma_tile_smem[1024];
.shared .align 8 .b64 tma_tile_bar;

.visible .entry tma_tile(
    .param .align 64 .b8 tma_tile_map[128],
    .param .u32 tma_tile_x,
    .param .u32 tma_tile_y,
    .param .u64 tma_tile_out
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<8>;

    mov.b64 %rd1, tma_tile_map;
    cvta.param.u64 %rd2, %rd1;
    ld.param.u32 %r1, [tma_tile_x];
    ld.param.u32 %r2, [tma_tile_y];
    ld.param.u64 %rd3, [tma_tile_out];
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, tma_tile_smem;
    mov.u32 %r5, tma_tile_bar;
    mov.u32 %r8, 1;
    mov.u32 %r9, 1024;
    setp.eq.u32 %p1, %r3, 0;
    @!%p1 bra TMA_INIT_DONE;
    mbarrier.init.shared.b64 [%r5], %r8;
    fence.mbarrier_init.release.cluster;
    fence.proxy.async.shared::cta;
TMA_INIT_DONE:
    bar.sync 0;
    @!%p1 bra TMA_WAIT;
    mbarrier.arrive.expect_tx.shared.b64 %rd4, [%r5], %r9;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd2, {%r1, %r2}], [%r5];
TMA_WAIT:
    mov.u32 %r6, 0;
    mbarrier.try_wait.parity.shared.b64 %p2, [%r5], %r6;
    @!%p2 bra TMA_WAIT;
    shl.b32 %r6, %r3, 2;
    add.s32 %r7, %r4, %r6;
    ld.shared.f32 %f1, [%r7];
    cvta.to.global.u64 %rd5, %rd3;
    mul.wide.u32 %rd6, %r3, 4;
    add.s64 %rd7, %rd5, %rd6;
    st.global.f32 [%rd7], %f1;
    ret;
}
"#;
