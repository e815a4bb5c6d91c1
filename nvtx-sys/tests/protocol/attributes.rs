//! Event attributes with every payload and message type, as a tool reads them, and 64-bit
//! range ids.

use crate::{Outcome, calls_logged, check, check_eq, wide};
use cuhost_nvtx_sys::*;

fn base() -> nvtxEventAttributes_t {
    let mut a = nvtxEventAttributes_t::default();
    a.version = 3;
    a.size = size_of::<nvtxEventAttributes_t>() as u16;
    a
}

pub fn every_payload_and_message_type() -> Outcome {
    check_eq!(size_of::<nvtxEventAttributes_t>(), 48);
    let unicode = wide("ünïcode ✓");
    // SAFETY: a live NUL-terminated string; the domain is the tool's handle.
    let (domain, registered) = unsafe {
        let d = nvtxDomainCreateA(c"attrs".as_ptr());
        (d, nvtxDomainRegisterStringA(d, c"registered text".as_ptr()))
    };
    let payloads: [(nvtxPayloadType_t, fn(&mut nvtxEventAttributes_t), &str); 7] = [
        (nvtxPayloadType_t::NVTX_PAYLOAD_UNKNOWN, |_| {}, "none"),
        (
            nvtxPayloadType_t::NVTX_PAYLOAD_TYPE_UNSIGNED_INT64,
            |a| a.payload.ullValue = u64::MAX - 1,
            "u64:18446744073709551614",
        ),
        (
            nvtxPayloadType_t::NVTX_PAYLOAD_TYPE_INT64,
            |a| a.payload.llValue = i64::MIN + 1,
            "i64:-9223372036854775807",
        ),
        (nvtxPayloadType_t::NVTX_PAYLOAD_TYPE_DOUBLE, |a| a.payload.dValue = -1234.5, "f64:-1234.5"),
        (
            nvtxPayloadType_t::NVTX_PAYLOAD_TYPE_UNSIGNED_INT32,
            |a| a.payload.uiValue = u32::MAX,
            "u32:4294967295",
        ),
        (nvtxPayloadType_t::NVTX_PAYLOAD_TYPE_INT32, |a| a.payload.iValue = -7, "i32:-7"),
        (nvtxPayloadType_t::NVTX_PAYLOAD_TYPE_FLOAT, |a| a.payload.fValue = 0.25, "f32:0.25"),
    ];
    let messages: [(nvtxMessageType_t, nvtxMessageValue_t, &str); 4] = [
        (nvtxMessageType_t::NVTX_MESSAGE_UNKNOWN, nvtxMessageValue_t::default(), "none"),
        (
            nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII,
            nvtxMessageValue_t { ascii: c"ascii text".as_ptr() },
            r#"ascii:"ascii text""#,
        ),
        (
            nvtxMessageType_t::NVTX_MESSAGE_TYPE_UNICODE,
            nvtxMessageValue_t { unicode: unicode.as_ptr() },
            r#"unicode:L"ünïcode ✓""#,
        ),
        (
            nvtxMessageType_t::NVTX_MESSAGE_TYPE_REGISTERED,
            nvtxMessageValue_t { registered },
            r#"registered:string "registered text""#,
        ),
    ];
    let mut expected = vec![
        r#"CORE2.DomainCreateA "attrs""#.to_string(),
        r#"CORE2.DomainRegisterStringA domain "attrs" "registered text""#.to_string(),
    ];
    for (i, (ptype, set, ptext)) in payloads.iter().enumerate() {
        for (mtype, value, mtext) in &messages {
            let mut a = base();
            a.category = i as u32 + 1;
            a.colorType = nvtxColorType_t::NVTX_COLOR_ARGB.0 as i32;
            a.color = 0xff10_2030 + i as u32;
            a.payloadType = ptype.0 as i32;
            set(&mut a);
            a.messageType = mtype.0 as i32;
            a.message = *value;
            // SAFETY: the attributes and everything they point at are live.
            unsafe { nvtxDomainMarkEx(domain, &a) };
            expected.push(format!(
                r#"CORE2.DomainMarkEx domain "attrs" v=3 size=48 category={} color=argb:{:08x} payload={ptext} message={mtext}"#,
                i + 1,
                0xff10_2030u32 + i as u32
            ));
        }
    }
    let calls = calls_logged();
    for (i, (got, want)) in calls.iter().zip(&expected).enumerate() {
        check!(got == want, "call {i}: the tool logged\n  {got}\nexpected\n  {want}");
    }
    check_eq!(calls.len(), expected.len());
    Ok(())
}

pub fn range_ids_are_64_bit() -> Outcome {
    let mut ids = Vec::new();
    // SAFETY: live NUL-terminated strings.
    unsafe {
        for _ in 0..3 {
            ids.push(nvtxRangeStartA(c"wide id".as_ptr()));
        }
        // Ended out of order, as start/end ranges may be.
        for &id in ids.iter().rev() {
            nvtxRangeEnd(id);
        }
    }
    check_eq!(ids, vec![0xdead_beef_0000_0001u64, 0xdead_beef_0000_0002, 0xdead_beef_0000_0003]);
    let ends: Vec<String> = calls_logged().into_iter().filter(|l| l.starts_with("CORE.RangeEnd")).collect();
    check_eq!(
        ends,
        vec![
            "CORE.RangeEnd 0xdeadbeef00000003".to_string(),
            "CORE.RangeEnd 0xdeadbeef00000002".to_string(),
            "CORE.RangeEnd 0xdeadbeef00000001".to_string(),
        ]
    );
    Ok(())
}
