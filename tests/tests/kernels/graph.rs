//! Hand-written PTX for the graph tests and benchmark, targeting sm_70; the driver compiles it
//! for whatever GPU is present.
#![allow(dead_code)]

/// `add_u32(u32* data, u32 n, u32 value)`: `data[i] += value` for `i < n`;
/// `mul_u32(u32* data, u32 n, u32 factor)`: `data[i] *= factor` for `i < n`;
/// `nothing()`: returns at once.
pub const PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .entry add_u32(
    .param .u64 add_data,
    .param .u32 add_n,
    .param .u32 add_value
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [add_data];
    ld.param.u32 %r1, [add_n];
    ld.param.u32 %r2, [add_value];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r1;
    @%p1 bra ADD_DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r7, [%rd4];
    add.u32 %r8, %r7, %r2;
    st.global.u32 [%rd4], %r8;
ADD_DONE:
    ret;
}

.visible .entry mul_u32(
    .param .u64 mul_data,
    .param .u32 mul_n,
    .param .u32 mul_factor
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [mul_data];
    ld.param.u32 %r1, [mul_n];
    ld.param.u32 %r2, [mul_factor];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r1;
    @%p1 bra MUL_DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r7, [%rd4];
    mul.lo.u32 %r8, %r7, %r2;
    st.global.u32 [%rd4], %r8;
MUL_DONE:
    ret;
}

.visible .entry nothing()
{
    ret;
}
"#;

/// Kernels that set a conditional handle through the device runtime's
/// `cudaGraphSetConditional(handle, value)`; launch them with one thread.
///
/// `count_below(u64 handle, u32* counter, u32 limit)`: `counter[0] += 1`, then sets the
/// handle to `counter[0] < limit` (the body of a WHILE loop that runs `limit` times);
/// `set_from(u64 handle, const u32* value)`: sets the handle to `value[0]`.
pub const PTX_CONDITIONAL: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.extern .func cudaGraphSetConditional
(
    .param .b64 cudaGraphSetConditional_param_0,
    .param .b32 cudaGraphSetConditional_param_1
)
;

.visible .entry count_below(
    .param .u64 count_handle,
    .param .u64 count_counter,
    .param .u32 count_limit
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [count_handle];
    ld.param.u64 %rd2, [count_counter];
    ld.param.u32 %r1, [count_limit];
    cvta.to.global.u64 %rd3, %rd2;
    ld.global.u32 %r2, [%rd3];
    add.u32 %r3, %r2, 1;
    st.global.u32 [%rd3], %r3;
    setp.lt.u32 %p1, %r3, %r1;
    selp.u32 %r4, 1, 0, %p1;
    {
    .param .b64 param0;
    st.param.b64 [param0+0], %rd1;
    .param .b32 param1;
    st.param.b32 [param1+0], %r4;
    call.uni cudaGraphSetConditional, (param0, param1);
    }
    ret;
}

.visible .entry set_from(
    .param .u64 set_handle,
    .param .u64 set_value
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [set_handle];
    ld.param.u64 %rd2, [set_value];
    cvta.to.global.u64 %rd3, %rd2;
    ld.global.u32 %r1, [%rd3];
    {
    .param .b64 param0;
    st.param.b64 [param0+0], %rd1;
    .param .b32 param1;
    st.param.b32 [param1+0], %r1;
    call.uni cudaGraphSetConditional, (param0, param1);
    }
    ret;
}
"#;
