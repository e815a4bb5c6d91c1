//! Hand-written PTX shared by the module, launch, occupancy and bad-input tests and the launch
//! benchmark. Each targets sm_70; the driver compiles it for whatever GPU is present.
#![allow(dead_code)]

/// `saxpy(u32 n, f32 a, const f32* x, f32* y)`: `y[i] = a * x[i] + y[i]` for `i < n`;
/// `empty()`: returns at once;
/// `scale_by_global(f32* data, u32 n)`: `data[i] *= factor`, where `factor` is a `__device__`
/// f32 and `hits` (a `__device__` u32[4]) counts the threads that ran, in `hits[0]`;
/// `reverse(const u32* in, u32* out)`: one block reverses `ntid.x` words through dynamic
/// shared memory;
/// `store_to(u64 addr)`: writes 1 to `addr` (used to fault).
pub const PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .global .align 4 .f32 factor = 0f3F800000;
.visible .global .align 4 .u32 hits[4];
.extern .shared .align 4 .b8 dynamic_smem[];

.visible .entry saxpy(
    .param .u32 saxpy_n,
    .param .f32 saxpy_a,
    .param .u64 saxpy_x,
    .param .u64 saxpy_y
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;

    ld.param.u32 %r1, [saxpy_n];
    ld.param.f32 %f1, [saxpy_a];
    ld.param.u64 %rd1, [saxpy_x];
    ld.param.u64 %rd2, [saxpy_y];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra SAXPY_DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
SAXPY_DONE:
    ret;
}

.visible .entry empty()
{
    ret;
}

.visible .entry scale_by_global(
    .param .u64 scale_data,
    .param .u32 scale_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<7>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [scale_data];
    ld.param.u32 %r1, [scale_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra SCALE_DONE;
    atom.global.add.u32 %r6, [hits], 1;
    ld.global.f32 %f1, [factor];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    mul.rn.f32 %f3, %f2, %f1;
    st.global.f32 [%rd4], %f3;
SCALE_DONE:
    ret;
}

.visible .entry reverse(
    .param .u64 reverse_in,
    .param .u64 reverse_out
)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<9>;

    ld.param.u64 %rd1, [reverse_in];
    ld.param.u64 %rd2, [reverse_out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ntid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.u32 %r3, [%rd4];
    mov.u64 %rd5, dynamic_smem;
    add.s64 %rd6, %rd5, %rd3;
    st.shared.u32 [%rd6], %r3;
    bar.sync 0;
    sub.s32 %r4, %r2, %r1;
    sub.s32 %r5, %r4, 1;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd5, %rd7;
    ld.shared.u32 %r6, [%rd8];
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r6;
    ret;
}

.visible .entry store_to(
    .param .u64 store_addr
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;

    ld.param.u64 %rd1, [store_addr];
    mov.u32 %r1, 1;
    st.global.u32 [%rd1], %r1;
    ret;
}
"#;

/// A device function in its own PTX, for the linker test: `twice(x) = 2 * x`.
pub const PTX_TWICE: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .func (.param .b32 twice_ret) twice(.param .b32 twice_x)
{
    .reg .f32 %f<3>;
    ld.param.f32 %f1, [twice_x];
    add.rn.f32 %f2, %f1, %f1;
    st.param.f32 [twice_ret], %f2;
    ret;
}
"#;

/// A kernel that calls `twice` from [`PTX_TWICE`]: `double_all(f32* data)` doubles
/// `data[tid.x]`.
pub const PTX_DOUBLE_ALL: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.extern .func (.param .b32 twice_ret) twice(.param .b32 twice_x);

.visible .entry double_all(
    .param .u64 double_data
)
{
    .reg .f32 %f<3>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [double_data];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    {
        .param .b32 arg_x;
        .param .b32 ret_val;
        st.param.f32 [arg_x], %f1;
        call.uni (ret_val), twice, (arg_x);
        ld.param.f32 %f2, [ret_val];
    }
    st.global.f32 [%rd4], %f2;
    ret;
}
"#;

/// `spin_fill(u32* out, u32 n, u32 value, u64 ns)`: waits `ns` nanoseconds of the GPU's
/// clock (`%globaltimer`), then writes `value` to `out[i]` for `i < n`: a kernel of a known
/// length, for the futures' tests and the wake-up benchmark. `store_to(u64 addr)`: writes 1
/// there (to fault).
pub const SPIN_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry spin_fill(.param .u64 out, .param .u32 n, .param .u32 value, .param .u64 ns)
{
    .reg .pred %p<3>;
    .reg .b32 %r<7>;
    .reg .b64 %rd<9>;

    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    ld.param.u32 %r2, [value];
    ld.param.u64 %rd2, [ns];
    mov.u64 %rd3, %globaltimer;
SPIN:
    mov.u64 %rd4, %globaltimer;
    sub.u64 %rd5, %rd4, %rd3;
    setp.lt.u64 %p1, %rd5, %rd2;
    @%p1 bra SPIN;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p2, %r6, %r1;
    @%p2 bra DONE;
    cvta.to.global.u64 %rd6, %rd1;
    mul.wide.u32 %rd7, %r6, 4;
    add.s64 %rd8, %rd6, %rd7;
    st.global.u32 [%rd8], %r2;
DONE:
    ret;
}

.visible .entry store_to(.param .u64 addr)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [addr];
    mov.u32 %r1, 1;
    st.global.u32 [%rd1], %r1;
    ret;
}
"#;
