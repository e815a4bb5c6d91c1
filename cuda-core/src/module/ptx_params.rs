//! The number of parameters of each kernel of a PTX text, read from its `.entry` declarations.
//!
//! Drivers before CUDA 13.2 cannot tell how many parameters a kernel has: the layout is read by
//! asking for parameter 0, 1, ... until the driver answers `CUDA_ERROR_INVALID_VALUE`, an answer
//! tools that report API errors (compute-sanitizer) show for every kernel looked up. For a module
//! loaded from PTX the count is in the text, so no query past the last parameter is needed.

#![forbid(unsafe_code)]

use super::ParamCounts;

/// The counts of every `.entry` of `ptx`. Text that does not parse as expected gives no count
/// for that kernel (its layout is then read by probing).
pub(crate) fn entry_param_counts(ptx: &str) -> ParamCounts {
    let text = without_comments(ptx);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = find_token(rest, ".entry") {
        rest = &rest[at + ".entry".len()..];
        let trimmed = rest.trim_start();
        let name_len = trimmed
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_$.%".contains(c)))
            .unwrap_or(trimmed.len());
        let name = &trimmed[..name_len];
        if name.is_empty() {
            continue;
        }
        let after = trimmed[name_len..].trim_start();
        let count = if let Some(params) = after.strip_prefix('(') {
            let Some(end) = params.find(')') else { continue };
            let list = &params[..end];
            list.split(',').filter(|p| find_token(p, ".param").is_some()).count()
        } else {
            0
        };
        out.push((name.to_string(), count));
    }
    ParamCounts::new(&out)
}

/// Where `token` starts in `text` as a whole word (not part of a longer directive).
fn find_token(text: &str, token: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(token) {
        let at = from + i;
        let end = at + token.len();
        let before_ok = at == 0 || !text.as_bytes()[at - 1].is_ascii_alphanumeric();
        let after_ok = text.as_bytes().get(end).is_none_or(|b| !(b.is_ascii_alphanumeric() || *b == b'_'));
        if before_ok && after_ok {
            return Some(at);
        }
        from = end;
    }
    None
}

/// `ptx` with `//` and `/* */` comments removed.
fn without_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |n| &rest[l + n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b + 2..].find("*/").map_or("", |e| &rest[b + 2 + e + 2..]);
                out.push(' ');
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_their_parameters_are_counted() {
        let ptx = "// saxpy(.param .u32 fake)\n.version 8.0\n.target sm_70\n\
            .visible .entry saxpy(.param .u32 n, .param .f32 a,\n  .param .u64 x, .param .u64 y)\n{ ret; }\n\
            .entry none\n{ ret; }\n\
            .visible .entry empty()\n{ ret; }\n\
            /* .entry commented(.param .u32 a) */\n\
            .func helper(.param .u32 a) { ret; }\n\
            .entry _Z5arrayPKfi(\n\t.param .align 8 .b8 _Z5arrayPKfi_param_0[16],\n\t.param .u32 _Z5arrayPKfi_param_1\n)\n{ ret; }\n";
        assert_eq!(
            entry_param_counts(ptx).iter().collect::<Vec<_>>(),
            [("saxpy", 4), ("none", 0), ("empty", 0), ("_Z5arrayPKfi", 2)]
        );
    }

    #[test]
    fn the_repository_kernels_parse() {
        let saxpy = include_str!("../../examples/kernels/saxpy.ptx");
        assert_eq!(entry_param_counts(saxpy).iter().collect::<Vec<_>>(), [("saxpy", 4)]);
    }

    #[test]
    fn text_that_is_not_ptx_gives_nothing() {
        assert!(entry_param_counts("").is_empty());
        assert!(entry_param_counts(".entryx(.param .u32 a)").is_empty());
        assert!(entry_param_counts(".entry broken(.param .u32 a").is_empty());
    }
}
