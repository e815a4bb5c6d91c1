//! Every NVTX function of every module reaches the tool, with its arguments intact.

use crate::{Outcome, calls_logged, check, check_eq, tool_log, wide};
use cuhost_nvtx_sys::*;
use std::ffi::c_void;

fn ascii_attributes(message: &std::ffi::CStr) -> nvtxEventAttributes_t {
    let mut a = nvtxEventAttributes_t::default();
    a.version = 3;
    a.size = size_of::<nvtxEventAttributes_t>() as u16;
    a.messageType = nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII.0 as i32;
    a.message.ascii = message.as_ptr();
    a
}

const INIT_LINES: [&str; 9] = [
    "init: callbacks.size=16 versioninfo.size=24 version=3 reserved=0 etid2=null etid0=null etid4=null",
    "module 0: none",
    "module 1: size=16 ends_null=true entries_set=true",
    "module 2: size=9 ends_null=true entries_set=true",
    "module 3: size=15 ends_null=true entries_set=true",
    "module 4: size=7 ends_null=true entries_set=true",
    "module 5: size=16 ends_null=true entries_set=true",
    "module 6: size=7 ends_null=true entries_set=true",
    "module 7: none",
];

pub fn every_module() -> Outcome {
    check_eq!(protocol::injection(), None);
    let mut expected: Vec<String> = Vec::new();
    let mut want = |s: &str| expected.push(s.to_string());
    let ex = ascii_attributes(c"ex");
    // SAFETY (whole block): every pointer passed is a live NUL-terminated string, attribute
    // structure, or a handle the tool returned; the handles for CUDA objects are never
    // dereferenced by the recording tool.
    unsafe {
        // CORE
        nvtxMarkA(c"mark a".as_ptr());
        want(r#"CORE.MarkA "mark a""#);
        nvtxMark(c"mark".as_ptr());
        want(r#"CORE.MarkA "mark""#);
        nvtxMarkW(wide("mark w").as_ptr());
        want(r#"CORE.MarkW L"mark w""#);
        nvtxMarkEx(&ex);
        want(r#"CORE.MarkEx v=3 size=48 category=0 color=none payload=none message=ascii:"ex""#);
        let a = nvtxRangeStartA(c"start a".as_ptr());
        want(r#"CORE.RangeStartA "start a" -> 0xdeadbeef00000001"#);
        let b = nvtxRangeStart(c"start".as_ptr());
        want(r#"CORE.RangeStartA "start" -> 0xdeadbeef00000002"#);
        let c = nvtxRangeStartW(wide("start w").as_ptr());
        want(r#"CORE.RangeStartW L"start w" -> 0xdeadbeef00000003"#);
        let d = nvtxRangeStartEx(&ex);
        want(
            r#"CORE.RangeStartEx v=3 size=48 category=0 color=none payload=none message=ascii:"ex" -> 0xdeadbeef00000004"#,
        );
        for id in [a, b, c, d] {
            nvtxRangeEnd(id);
            want(&format!("CORE.RangeEnd {id:#x}"));
        }
        check_eq!(
            [a, b, c, d],
            [0xdead_beef_0000_0001u64, 0xdead_beef_0000_0002, 0xdead_beef_0000_0003, 0xdead_beef_0000_0004]
        );
        check_eq!(nvtxRangePushA(c"push a".as_ptr()), 0);
        want(r#"CORE.RangePushA "push a""#);
        check_eq!(nvtxRangePush(c"push".as_ptr()), 1);
        want(r#"CORE.RangePushA "push""#);
        check_eq!(nvtxRangePushEx(&ex), 2);
        want(r#"CORE.RangePushEx v=3 size=48 category=0 color=none payload=none message=ascii:"ex""#);
        // The tool left nvtxRangePushW's slot empty: the default, and nothing reaches it.
        check_eq!(nvtxRangePushW(wide("not seen").as_ptr()), -2);
        for level in [2, 1, 0] {
            check_eq!(nvtxRangePop(), level);
            want("CORE.RangePop");
        }
        nvtxNameCategoryA(5, c"cat a".as_ptr());
        want(r#"CORE.NameCategoryA 5 "cat a""#);
        nvtxNameCategory(6, c"cat".as_ptr());
        want(r#"CORE.NameCategoryA 6 "cat""#);
        nvtxNameCategoryW(7, wide("cat w").as_ptr());
        want(r#"CORE.NameCategoryW 7 L"cat w""#);
        nvtxNameOsThreadA(1234, c"thread a".as_ptr());
        want(r#"CORE.NameOsThreadA 1234 "thread a""#);
        nvtxNameOsThread(1235, c"thread".as_ptr());
        want(r#"CORE.NameOsThreadA 1235 "thread""#);
        nvtxNameOsThreadW(1236, wide("thread w").as_ptr());
        want(r#"CORE.NameOsThreadW 1236 L"thread w""#);

        // CUDA
        let ctx = 0x1000 as CUcontext;
        let stream = 0x2000 as CUstream;
        let event = 0x3000 as CUevent;
        nvtxNameCuDeviceA(3, c"dev a".as_ptr());
        want(r#"CUDA.NameCuDeviceA 3 "dev a""#);
        nvtxNameCuDevice(4, c"dev".as_ptr());
        want(r#"CUDA.NameCuDeviceA 4 "dev""#);
        nvtxNameCuDeviceW(5, wide("dev w").as_ptr());
        want(r#"CUDA.NameCuDeviceW 5 L"dev w""#);
        nvtxNameCuContextA(ctx, c"ctx a".as_ptr());
        want(r#"CUDA.NameCuContextA 0x1000 "ctx a""#);
        nvtxNameCuContext(ctx, c"ctx".as_ptr());
        want(r#"CUDA.NameCuContextA 0x1000 "ctx""#);
        nvtxNameCuContextW(ctx, wide("ctx w").as_ptr());
        want(r#"CUDA.NameCuContextW 0x1000 L"ctx w""#);
        nvtxNameCuStreamA(stream, c"stream a".as_ptr());
        want(r#"CUDA.NameCuStreamA 0x2000 "stream a""#);
        nvtxNameCuStream(stream, c"stream".as_ptr());
        want(r#"CUDA.NameCuStreamA 0x2000 "stream""#);
        nvtxNameCuStreamW(stream, wide("stream w").as_ptr());
        want(r#"CUDA.NameCuStreamW 0x2000 L"stream w""#);
        nvtxNameCuEventA(event, c"event a".as_ptr());
        want(r#"CUDA.NameCuEventA 0x3000 "event a""#);
        nvtxNameCuEvent(event, c"event".as_ptr());
        want(r#"CUDA.NameCuEventA 0x3000 "event""#);
        nvtxNameCuEventW(event, wide("event w").as_ptr());
        want(r#"CUDA.NameCuEventW 0x3000 L"event w""#);

        // CUDART
        nvtxNameCudaDeviceA(1, c"rt dev a".as_ptr());
        want(r#"CUDART.NameCudaDeviceA 1 "rt dev a""#);
        nvtxNameCudaDevice(2, c"rt dev".as_ptr());
        want(r#"CUDART.NameCudaDeviceA 2 "rt dev""#);
        nvtxNameCudaDeviceW(3, wide("rt dev w").as_ptr());
        want(r#"CUDART.NameCudaDeviceW 3 L"rt dev w""#);
        nvtxNameCudaStreamA(stream, c"rt stream a".as_ptr());
        want(r#"CUDART.NameCudaStreamA 0x2000 "rt stream a""#);
        nvtxNameCudaStream(stream, c"rt stream".as_ptr());
        want(r#"CUDART.NameCudaStreamA 0x2000 "rt stream""#);
        nvtxNameCudaStreamW(stream, wide("rt stream w").as_ptr());
        want(r#"CUDART.NameCudaStreamW 0x2000 L"rt stream w""#);
        nvtxNameCudaEventA(event, c"rt event a".as_ptr());
        want(r#"CUDART.NameCudaEventA 0x3000 "rt event a""#);
        nvtxNameCudaEvent(event, c"rt event".as_ptr());
        want(r#"CUDART.NameCudaEventA 0x3000 "rt event""#);
        nvtxNameCudaEventW(event, wide("rt event w").as_ptr());
        want(r#"CUDART.NameCudaEventW 0x3000 L"rt event w""#);

        // CORE2
        nvtxInitialize(std::ptr::null());
        want("CORE2.Initialize 0x0");
        let dom = nvtxDomainCreateA(c"dom".as_ptr());
        want(r#"CORE2.DomainCreateA "dom""#);
        check!(!dom.is_null(), "nvtxDomainCreateA returned the tool's handle");
        let dom2 = nvtxDomainCreate(c"dom2".as_ptr());
        want(r#"CORE2.DomainCreateA "dom2""#);
        let domw = nvtxDomainCreateW(wide("dom w").as_ptr());
        want(r#"CORE2.DomainCreateW L"dom w""#);
        let s = nvtxDomainRegisterStringA(dom, c"reg".as_ptr());
        want(r#"CORE2.DomainRegisterStringA domain "dom" "reg""#);
        let _ = nvtxDomainRegisterString(dom, c"reg2".as_ptr());
        want(r#"CORE2.DomainRegisterStringA domain "dom" "reg2""#);
        let _ = nvtxDomainRegisterStringW(dom, wide("reg w").as_ptr());
        want(r#"CORE2.DomainRegisterStringW domain "dom" L"reg w""#);
        let mut registered = ascii_attributes(c"unused");
        registered.messageType = nvtxMessageType_t::NVTX_MESSAGE_TYPE_REGISTERED.0 as i32;
        registered.message.registered = s;
        nvtxDomainMarkEx(dom, &registered);
        want(
            r#"CORE2.DomainMarkEx domain "dom" v=3 size=48 category=0 color=none payload=none message=registered:string "reg""#,
        );
        nvtxDomainMarkEx(std::ptr::null_mut(), &ex);
        want(
            r#"CORE2.DomainMarkEx default v=3 size=48 category=0 color=none payload=none message=ascii:"ex""#,
        );
        let id = nvtxDomainRangeStartEx(dom, &ex);
        want(
            r#"CORE2.DomainRangeStartEx domain "dom" v=3 size=48 category=0 color=none payload=none message=ascii:"ex" -> 0xdeadbeef00000005"#,
        );
        check_eq!(id, 0xdead_beef_0000_0005u64);
        nvtxDomainRangeEnd(dom, id);
        want(r#"CORE2.DomainRangeEnd domain "dom" 0xdeadbeef00000005"#);
        check_eq!(nvtxDomainRangePushEx(dom, &ex), 0);
        want(
            r#"CORE2.DomainRangePushEx domain "dom" v=3 size=48 category=0 color=none payload=none message=ascii:"ex""#,
        );
        check_eq!(nvtxDomainRangePop(dom), 0);
        want(r#"CORE2.DomainRangePop domain "dom""#);
        let mut res = nvtxResourceAttributes_t::default();
        res.version = 3;
        res.size = size_of::<nvtxResourceAttributes_t>() as u16;
        res.identifierType = nvtxResourceGenericType_t::NVTX_RESOURCE_TYPE_GENERIC_POINTER.0 as i32;
        res.identifier.pValue = 0x4000 as *const c_void;
        res.messageType = nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII.0 as i32;
        res.message.ascii = c"res".as_ptr();
        let r = nvtxDomainResourceCreate(dom, &mut res);
        want(r#"CORE2.DomainResourceCreate domain "dom" type=0x10001 id=0x4000 message=ascii:"res""#);
        nvtxDomainResourceDestroy(r);
        want(r#"CORE2.DomainResourceDestroy resource ascii:"res""#);
        nvtxDomainNameCategoryA(dom, 8, c"dcat a".as_ptr());
        want(r#"CORE2.DomainNameCategoryA domain "dom" 8 "dcat a""#);
        nvtxDomainNameCategory(dom, 9, c"dcat".as_ptr());
        want(r#"CORE2.DomainNameCategoryA domain "dom" 9 "dcat""#);
        nvtxDomainNameCategoryW(dom, 10, wide("dcat w").as_ptr());
        want(r#"CORE2.DomainNameCategoryW domain "dom" 10 L"dcat w""#);

        // SYNC
        let mut sync = nvtxSyncUserAttributes_t::default();
        sync.version = 3;
        sync.size = size_of::<nvtxSyncUserAttributes_t>() as u16;
        sync.messageType = nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII.0 as i32;
        sync.message.ascii = c"lock".as_ptr();
        let h = nvtxDomainSyncUserCreate(dom, &sync);
        want(r#"SYNC.SyncUserCreate domain "dom" size=16 message=ascii:"lock""#);
        nvtxDomainSyncUserAcquireStart(h);
        want(r#"SYNC.SyncUserAcquireStart sync ascii:"lock""#);
        nvtxDomainSyncUserAcquireFailed(h);
        want(r#"SYNC.SyncUserAcquireFailed sync ascii:"lock""#);
        nvtxDomainSyncUserAcquireSuccess(h);
        want(r#"SYNC.SyncUserAcquireSuccess sync ascii:"lock""#);
        nvtxDomainSyncUserReleasing(h);
        want(r#"SYNC.SyncUserReleasing sync ascii:"lock""#);
        nvtxDomainSyncUserDestroy(h);
        want(r#"SYNC.SyncUserDestroy sync ascii:"lock""#);

        for d in [dom, dom2, domw] {
            nvtxDomainDestroy(d);
        }
        want(r#"CORE2.DomainDestroy domain "dom""#);
        want(r#"CORE2.DomainDestroy domain "dom2""#);
        want(r#"CORE2.DomainDestroy domain L"dom w""#);
    }
    let log = tool_log();
    check_eq!(log.get(..INIT_LINES.len()).map(|l| l.to_vec()), Some(INIT_LINES.map(String::from).to_vec()));
    let calls = calls_logged();
    for (i, (got, want)) in calls.iter().zip(&expected).enumerate() {
        check!(got == want, "call {i}: the tool logged\n  {got}\nexpected\n  {want}");
    }
    check_eq!(calls.len(), expected.len());
    check!(protocol::injection().is_some_and(|i| i.is_attached()), "{:?}", protocol::injection());
    check_eq!(protocol::injection().map(|i| i.code()), Some(NVTX_SUCCESS));
    check_eq!(protocol::injection_nvtx_version(), Some(3));
    Ok(())
}
