//! The driver ABI table, read from the function list `cuda-driver-sys` generates from
//! `cudaTypedefs.h`: for each function looked up by name, its ABI versions and the versions of
//! their per-thread-default-stream variants.

use std::sync::OnceLock;

const GENERATED: &str = include_str!("../../../cuda-driver-sys/src/generated/functions.rs");

/// One generated line: the function looked up as `symbol`, at `version`, with a per-thread
/// variant at `per_thread_version` (0 when it has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name passed to `cuGetProcAddress`.
    pub symbol: String,
    /// The ABI version of the default-stream variant.
    pub version: i32,
    /// The ABI version of the per-thread variant; 0 when there is none.
    pub per_thread_version: i32,
}

/// Every line of the generated table.
pub fn table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| GENERATED.lines().filter_map(parse).collect())
}

/// `name(args) -> ret => c"symbol", version, per_thread_version;`
fn parse(line: &str) -> Option<Entry> {
    let (_, tail) = line.split_once("=> c\"")?;
    let (symbol, numbers) = tail.split_once('"')?;
    let mut numbers = numbers.trim_start_matches(',').trim_end_matches(';').split(',');
    let version = numbers.next()?.trim().parse().ok()?;
    let per_thread_version = numbers.next()?.trim().parse().ok()?;
    Some(Entry { symbol: symbol.to_string(), version, per_thread_version })
}

/// What a driver that reaches version `reach` answers when asked for `symbol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// No such function.
    Unknown,
    /// The function exists, but only at versions above `reach`.
    TooOld,
    /// The ABI handed out: the version of the default-stream variant it belongs to.
    Abi(i32),
}

/// The newest ABI of `symbol` at or below `reach`, per-thread variant or not.
pub fn answer(symbol: &str, reach: i32, per_thread: bool) -> Answer {
    let entries: Vec<&Entry> = table().iter().filter(|e| e.symbol == symbol).collect();
    if entries.is_empty() {
        return Answer::Unknown;
    }
    let has_per_thread = per_thread && entries.iter().any(|e| e.per_thread_version != 0);
    let version_of = |e: &Entry| if has_per_thread { e.per_thread_version } else { e.version };
    entries
        .iter()
        .filter(|e| version_of(e) != 0 && version_of(e) <= reach)
        .max_by_key(|e| version_of(e))
        .map_or(Answer::TooOld, |e| Answer::Abi(e.version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_abi_of_the_versioned_functions() {
        let versions = |s: &str| -> Vec<i32> {
            let mut v: Vec<i32> = table().iter().filter(|e| e.symbol == s).map(|e| e.version).collect();
            v.sort_unstable();
            // A function of several versions is listed by its C name and under each version's
            // own name (`cuEventElapsedTime_v12080`): the same ABI twice.
            v.dedup();
            v
        };
        assert_eq!(versions("cuEventElapsedTime"), [2000, 12080]);
        assert_eq!(versions("cuCtxCreate"), [3020, 11040, 12050]);
        assert_eq!(versions("cuMemAdvise"), [8000, 12020]);
        assert_eq!(versions("cuMemPrefetchAsync"), [8000, 12020]);
        assert_eq!(versions("cuCtxGetDevice"), [2000, 13000]);
    }

    #[test]
    fn a_driver_answers_with_the_newest_abi_it_reaches() {
        assert_eq!(answer("cuCtxCreate", 12040, false), Answer::Abi(11040));
        assert_eq!(answer("cuCtxCreate", 13000, false), Answer::Abi(12050));
        assert_eq!(answer("cuFuncGetParamInfo", 12020, false), Answer::TooOld);
        assert_eq!(answer("cuNoSuchFunction", 13000, false), Answer::Unknown);
        // The per-thread variant of cuMemcpy came with 7.0, the legacy one with 4.0.
        assert_eq!(answer("cuMemcpy", 6000, true), Answer::TooOld);
        assert_eq!(answer("cuMemcpy", 7000, true), Answer::Abi(4000));
    }
}
