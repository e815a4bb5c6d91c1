//! The parameter layout of a kernel as the driver reports it, kept inline so that a launch can
//! check its arguments against it with a few comparisons and no driver call.

use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// How many parameter sizes are kept; parameters past these are counted but their sizes are
/// not checked.
pub(crate) const CHECKED_PARAMS: usize = 16;

/// The count marking a layout the driver could not report.
const UNKNOWN: u16 = u16::MAX;

/// The number of parameters of a kernel and the sizes of the first [`CHECKED_PARAMS`], read
/// once from `cuFuncGetParamInfo` or `cuKernelGetParamInfo`; or unknown, when the driver
/// cannot say (older than CUDA 12.4, or any other failure), in which case launches are not
/// checked.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamLayout {
    count: u16,
    sizes: [u16; CHECKED_PARAMS],
}

impl std::fmt::Debug for ParamLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.count {
            UNKNOWN => f.write_str("ParamLayout(unknown)"),
            count => {
                let kept = usize::from(count).min(CHECKED_PARAMS);
                write!(f, "ParamLayout({count} parameters, sizes {:?})", &self.sizes[..kept])
            }
        }
    }
}

impl ParamLayout {
    /// A layout that checks nothing.
    pub(crate) const UNKNOWN: ParamLayout = ParamLayout { count: UNKNOWN, sizes: [0; CHECKED_PARAMS] };

    /// Reads the layout: where `count(&mut n)` succeeds (`cuFuncGetParamCount`, CUDA 13.2
    /// drivers) by asking `query(index, &mut offset, &mut size)` for each of the `n`
    /// parameters; otherwise by asking for index 0, 1, ... until the driver answers
    /// `CUDA_ERROR_INVALID_VALUE` (past the last parameter; tools that report API errors, such
    /// as compute-sanitizer, show that answer). Any other failure (the call missing from the
    /// driver, a function not loaded yet, ...) or a size that does not fit the layout gives
    /// [`ParamLayout::UNKNOWN`]: the check is a safeguard, and its absence must not stop a
    /// kernel from being used.
    #[cold]
    pub(crate) fn read(
        count: impl FnOnce(&mut usize) -> sys::CUresult,
        mut query: impl FnMut(usize, &mut usize, &mut usize) -> sys::CUresult,
    ) -> ParamLayout {
        let mut known = 0;
        if count(&mut known) == sys::CUresult::CUDA_SUCCESS {
            return ParamLayout::read_known(known, query);
        }
        let mut layout = ParamLayout { count: 0, sizes: [0; CHECKED_PARAMS] };
        for index in 0..usize::from(UNKNOWN) {
            let (mut offset, mut size) = (0, 0);
            match query(index, &mut offset, &mut size) {
                sys::CUresult::CUDA_SUCCESS => {}
                sys::CUresult::CUDA_ERROR_INVALID_VALUE => return layout,
                _ => return ParamLayout::UNKNOWN,
            }
            if let Some(slot) = layout.sizes.get_mut(index) {
                match u16::try_from(size) {
                    Ok(size) => *slot = size,
                    Err(_) => return ParamLayout::UNKNOWN,
                }
            }
            layout.count += 1;
        }
        ParamLayout::UNKNOWN
    }

    /// The layout of a kernel of `count` parameters, each read with `query`.
    fn read_known(
        count: usize,
        mut query: impl FnMut(usize, &mut usize, &mut usize) -> sys::CUresult,
    ) -> ParamLayout {
        let Ok(count16) = u16::try_from(count) else { return ParamLayout::UNKNOWN };
        if count16 == UNKNOWN {
            return ParamLayout::UNKNOWN;
        }
        let mut layout = ParamLayout { count: count16, sizes: [0; CHECKED_PARAMS] };
        for index in 0..count.min(CHECKED_PARAMS) {
            let (mut offset, mut size) = (0, 0);
            if query(index, &mut offset, &mut size) != sys::CUresult::CUDA_SUCCESS {
                return ParamLayout::UNKNOWN;
            }
            match u16::try_from(size) {
                Ok(size) => layout.sizes[index] = size,
                Err(_) => return ParamLayout::UNKNOWN,
            }
        }
        layout
    }

    /// A layout of the given parameter sizes (at most [`CHECKED_PARAMS`] are kept).
    #[cfg(test)]
    pub(crate) fn from_sizes(sizes: &[u16]) -> ParamLayout {
        let mut layout = ParamLayout { count: sizes.len() as u16, sizes: [0; CHECKED_PARAMS] };
        for (slot, &size) in layout.sizes.iter_mut().zip(sizes) {
            *slot = size;
        }
        layout
    }

    /// Whether the driver reported the layout.
    #[inline]
    pub(crate) fn is_known(&self) -> bool {
        self.count != UNKNOWN
    }

    /// Compares the argument sizes of a launch with the layout: a different number of
    /// arguments, or an argument whose size differs from its parameter's, is an
    /// [`Error::InvalidArgument`]. An unknown layout accepts anything.
    #[inline]
    pub(crate) fn check(&self, operation: &'static str, sizes: &[usize]) -> Result<()> {
        if !self.is_known() {
            return Ok(());
        }
        let count = usize::from(self.count);
        if sizes.len() != count {
            return Err(count_mismatch(operation, count, sizes.len()));
        }
        for (index, (&expected, &given)) in self.sizes.iter().zip(sizes).enumerate() {
            if usize::from(expected) != given {
                return Err(size_mismatch(operation, index, expected, given));
            }
        }
        Ok(())
    }
}

/// The parameter count of a function (`cuFuncGetParamCount`, CUDA 13.2), for
/// [`ParamLayout::read`]; `CUDA_ERROR_NOT_FOUND` where the bindings predate it, and the loader's
/// refusal (no driver call) where the driver does.
pub(crate) fn function_param_count(raw: sys::CUfunction, out: &mut usize) -> sys::CUresult {
    #[cfg(cuda_headers_13_2)]
    // SAFETY: a live function (the caller's) and one out-parameter.
    return unsafe { sys::cuFuncGetParamCount(raw, out) };
    #[cfg(not(cuda_headers_13_2))]
    {
        let _ = (raw, out);
        sys::CUresult::CUDA_ERROR_NOT_FOUND
    }
}

/// The parameter count of a library kernel (`cuKernelGetParamCount`, CUDA 13.2), as
/// [`function_param_count`].
pub(crate) fn kernel_param_count(raw: sys::CUkernel, out: &mut usize) -> sys::CUresult {
    #[cfg(cuda_headers_13_2)]
    // SAFETY: a live kernel (the caller's) and one out-parameter.
    return unsafe { sys::cuKernelGetParamCount(raw, out) };
    #[cfg(not(cuda_headers_13_2))]
    {
        let _ = (raw, out);
        sys::CUresult::CUDA_ERROR_NOT_FOUND
    }
}

#[cold]
fn count_mismatch(operation: &'static str, expected: usize, given: usize) -> Error {
    let parameters = if expected == 1 { "parameter" } else { "parameters" };
    let arguments = if given == 1 { "argument was" } else { "arguments were" };
    Error::invalid(
        operation,
        format!("the kernel takes {expected} {parameters} but {given} {arguments} given"),
    )
}

#[cold]
fn size_mismatch(operation: &'static str, index: usize, expected: u16, given: usize) -> Error {
    Error::invalid(
        operation,
        format!(
            "parameter {index} of the kernel is {expected} bytes but argument {index} is {given} bytes; pass a value of the parameter's type (device pointers are 8 bytes)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver without `cuFuncGetParamCount`.
    fn no_count(_: &mut usize) -> sys::CUresult {
        sys::CUresult::CUDA_ERROR_NOT_FOUND
    }

    fn message(r: Result<()>) -> String {
        match r {
            Err(e @ Error::InvalidArgument { .. }) => e.to_string(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn matching_arguments_pass() {
        let saxpy = ParamLayout::from_sizes(&[4, 4, 8, 8]);
        assert!(saxpy.check("t", &[4, 4, 8, 8]).is_ok());
        assert!(ParamLayout::from_sizes(&[]).check("t", &[]).is_ok());
    }

    #[test]
    fn a_different_count_is_refused() {
        let saxpy = ParamLayout::from_sizes(&[4, 4, 8, 8]);
        let e = message(saxpy.check("Function::launch", &[4, 4, 8]));
        assert!(e.starts_with("Function::launch: "), "{e}");
        assert!(e.contains("takes 4 parameters but 3 arguments"), "{e}");
        let e = message(ParamLayout::from_sizes(&[]).check("t", &[8]));
        assert!(e.contains("takes 0 parameters but 1 argument was given"), "{e}");
        assert!(ParamLayout::from_sizes(&[8]).check("t", &[]).is_err());
    }

    #[test]
    fn a_different_size_is_refused_naming_the_parameter() {
        let saxpy = ParamLayout::from_sizes(&[4, 4, 8, 8]);
        let e = message(saxpy.check("t", &[4, 4, 4, 8]));
        assert!(e.contains("parameter 2 of the kernel is 8 bytes but argument 2 is 4 bytes"), "{e}");
        let e = message(saxpy.check("t", &[4, 4, 8, 16]));
        assert!(e.contains("parameter 3 of the kernel is 8 bytes but argument 3 is 16 bytes"), "{e}");
    }

    #[test]
    fn an_unknown_layout_accepts_anything() {
        assert!(!ParamLayout::UNKNOWN.is_known());
        assert!(ParamLayout::UNKNOWN.check("t", &[]).is_ok());
        assert!(ParamLayout::UNKNOWN.check("t", &[1, 2, 3]).is_ok());
    }

    #[test]
    fn parameters_past_the_kept_sizes_are_counted_only() {
        let mut sizes = [4u16; 20];
        sizes[18] = 8;
        let mut layout = ParamLayout::read(no_count, |i, _, size| match sizes.get(i) {
            Some(&s) => {
                *size = usize::from(s);
                sys::CUresult::CUDA_SUCCESS
            }
            None => sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        });
        assert_eq!(layout.count, 20);
        let mut given = [4usize; 20];
        assert!(layout.check("t", &given).is_ok(), "the size of parameter 18 is not kept");
        given[3] = 8;
        assert!(layout.check("t", &given).is_err());
        assert!(layout.check("t", &[4; 19]).is_err());
        layout = ParamLayout::read(no_count, |_, _, _| sys::CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(layout, ParamLayout::from_sizes(&[]));
    }

    #[test]
    fn a_driver_that_cannot_say_gives_an_unknown_layout() {
        for status in [
            sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
            sys::CUresult::CUDA_ERROR_NOT_FOUND,
            sys::CUresult::CUDA_ERROR_FUNCTION_NOT_LOADED,
        ] {
            assert_eq!(ParamLayout::read(no_count, |_, _, _| status), ParamLayout::UNKNOWN);
        }
        // Failing part way through is unknown too, not a shorter layout.
        let layout = ParamLayout::read(no_count, |i, _, size| {
            *size = 4;
            if i < 2 { sys::CUresult::CUDA_SUCCESS } else { sys::CUresult::CUDA_ERROR_NOT_SUPPORTED }
        });
        assert_eq!(layout, ParamLayout::UNKNOWN);
        // A size too large to keep.
        let layout = ParamLayout::read(no_count, |i, _, size| {
            *size = 1 << 20;
            if i < 1 { sys::CUresult::CUDA_SUCCESS } else { sys::CUresult::CUDA_ERROR_INVALID_VALUE }
        });
        assert_eq!(layout, ParamLayout::UNKNOWN);
        // A driver that never says where the parameters end.
        assert_eq!(ParamLayout::read(no_count, |_, _, _| sys::CUresult::CUDA_SUCCESS), ParamLayout::UNKNOWN);
    }

    #[test]
    fn a_reported_count_is_read_without_asking_past_the_last_parameter() {
        let sizes = [4usize, 8, 8];
        let mut asked = Vec::new();
        let layout = ParamLayout::read(
            |n| {
                *n = sizes.len();
                sys::CUresult::CUDA_SUCCESS
            },
            |i, _, size| {
                asked.push(i);
                match sizes.get(i) {
                    Some(&s) => {
                        *size = s;
                        sys::CUresult::CUDA_SUCCESS
                    }
                    None => sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                }
            },
        );
        assert_eq!(layout, ParamLayout::from_sizes(&[4, 8, 8]));
        assert_eq!(asked, [0, 1, 2]);
        // A parameter the driver cannot describe leaves the layout unknown.
        let failing = ParamLayout::read(
            |n| {
                *n = 2;
                sys::CUresult::CUDA_SUCCESS
            },
            |_, _, _| sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
        );
        assert_eq!(failing, ParamLayout::UNKNOWN);
    }
}
