//! Event attributes: colour, category, payload and message of a mark or range.
//!
//! See NVIDIA's [Event Attributes](https://nvidia.github.io/NVTX/doxygen/group___e_v_e_n_t___a_t_t_r_i_b_u_t_e_s.html).

use super::RegisteredString;
use cuhost_nvtx_sys as sys;
use std::ffi::CStr;
use std::marker::PhantomData;

/// A value attached to a mark or range, shown by tools next to it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Payload {
    /// `NVTX_PAYLOAD_TYPE_UNSIGNED_INT64`.
    U64(u64),
    /// `NVTX_PAYLOAD_TYPE_INT64`.
    I64(i64),
    /// `NVTX_PAYLOAD_TYPE_DOUBLE`.
    F64(f64),
    /// `NVTX_PAYLOAD_TYPE_UNSIGNED_INT32`.
    U32(u32),
    /// `NVTX_PAYLOAD_TYPE_INT32`.
    I32(i32),
    /// `NVTX_PAYLOAD_TYPE_FLOAT`.
    F32(f32),
}

macro_rules! payload_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Payload {
            fn from(value: $t) -> Self {
                Payload::$v(value)
            }
        }
    )*};
}
payload_from!(u64 => U64, i64 => I64, f64 => F64, u32 => U32, i32 => I32, f32 => F32);

/// The attributes of a mark or range (`nvtxEventAttributes_t`, version 3): a builder.
///
/// ```
/// use cuhost::nvtx::{self, EventAttributes};
/// let attributes = EventAttributes::new().message(c"step").color(0xff76b900).category(2).payload(7u64);
/// let _range = nvtx::push_range_with(&attributes);
/// ```
///
/// The message and a registered string are borrowed for `'a`, since NVTX reads them when the
/// event is recorded.
#[derive(Clone, Copy)]
pub struct EventAttributes<'a> {
    raw: sys::nvtxEventAttributes_t,
    _message: PhantomData<&'a CStr>,
}

impl Default for EventAttributes<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for EventAttributes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventAttributes")
            .field("category", &self.raw.category)
            .field("color_type", &self.raw.colorType)
            .field("color", &format_args!("{:#010x}", self.raw.color))
            .field("payload", &self.payload_value())
            .field("message_type", &self.raw.messageType)
            .finish()
    }
}

impl<'a> EventAttributes<'a> {
    /// Attributes with nothing set: no message, colour, category or payload.
    pub fn new() -> Self {
        let raw = sys::nvtxEventAttributes_t {
            version: sys::NVTX_VERSION as u16,
            size: size_of::<sys::nvtxEventAttributes_t>() as u16,
            ..Default::default()
        };
        EventAttributes { raw, _message: PhantomData }
    }

    /// An ASCII message (`NVTX_MESSAGE_TYPE_ASCII`).
    pub fn message(mut self, message: &'a CStr) -> Self {
        self.raw.messageType = sys::nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII.0 as i32;
        self.raw.message.ascii = message.as_ptr();
        self
    }

    /// A message registered with [`Domain::register_string`](super::Domain::register_string)
    /// (`NVTX_MESSAGE_TYPE_REGISTERED`); use it only with events of that domain.
    pub fn registered_message(mut self, message: RegisteredString<'a>) -> Self {
        self.raw.messageType = sys::nvtxMessageType_t::NVTX_MESSAGE_TYPE_REGISTERED.0 as i32;
        self.raw.message.registered = message.as_raw();
        self
    }

    /// A colour as `0xAARRGGBB` (`NVTX_COLOR_ARGB`).
    pub fn color(mut self, argb: u32) -> Self {
        self.raw.colorType = sys::nvtxColorType_t::NVTX_COLOR_ARGB.0 as i32;
        self.raw.color = argb;
        self
    }

    /// An opaque colour from red, green and blue.
    pub fn rgb(self, red: u8, green: u8, blue: u8) -> Self {
        self.color(0xff00_0000 | (u32::from(red) << 16) | (u32::from(green) << 8) | u32::from(blue))
    }

    /// A category; name it with [`name_category`](super::name_category) or
    /// [`Domain::name_category`](super::Domain::name_category).
    pub fn category(mut self, category: u32) -> Self {
        self.raw.category = category;
        self
    }

    /// A payload of any of NVTX's six types.
    pub fn payload(mut self, payload: impl Into<Payload>) -> Self {
        use sys::nvtxPayloadType_t as T;
        let (kind, value) = match payload.into() {
            Payload::U64(v) => {
                (T::NVTX_PAYLOAD_TYPE_UNSIGNED_INT64, sys::nvtxEventAttributes_v2_payload_t { ullValue: v })
            }
            Payload::I64(v) => {
                (T::NVTX_PAYLOAD_TYPE_INT64, sys::nvtxEventAttributes_v2_payload_t { llValue: v })
            }
            Payload::F64(v) => {
                (T::NVTX_PAYLOAD_TYPE_DOUBLE, sys::nvtxEventAttributes_v2_payload_t { dValue: v })
            }
            Payload::U32(v) => {
                (T::NVTX_PAYLOAD_TYPE_UNSIGNED_INT32, sys::nvtxEventAttributes_v2_payload_t { uiValue: v })
            }
            Payload::I32(v) => {
                (T::NVTX_PAYLOAD_TYPE_INT32, sys::nvtxEventAttributes_v2_payload_t { iValue: v })
            }
            Payload::F32(v) => {
                (T::NVTX_PAYLOAD_TYPE_FLOAT, sys::nvtxEventAttributes_v2_payload_t { fValue: v })
            }
        };
        self.raw.payloadType = kind.0 as i32;
        self.raw.payload = value;
        self
    }

    /// The payload set, if any.
    pub fn payload_value(&self) -> Option<Payload> {
        use sys::nvtxPayloadType_t as T;
        let p = self.raw.payload;
        // SAFETY: each arm reads the union member that `payload` wrote for this type.
        unsafe {
            match sys::nvtxPayloadType_t(self.raw.payloadType as u32) {
                T::NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 => Some(Payload::U64(p.ullValue)),
                T::NVTX_PAYLOAD_TYPE_INT64 => Some(Payload::I64(p.llValue)),
                T::NVTX_PAYLOAD_TYPE_DOUBLE => Some(Payload::F64(p.dValue)),
                T::NVTX_PAYLOAD_TYPE_UNSIGNED_INT32 => Some(Payload::U32(p.uiValue)),
                T::NVTX_PAYLOAD_TYPE_INT32 => Some(Payload::I32(p.iValue)),
                T::NVTX_PAYLOAD_TYPE_FLOAT => Some(Payload::F32(p.fValue)),
                _ => None,
            }
        }
    }

    /// The C structure, for calls through [`cuhost_nvtx_sys`].
    pub fn as_raw(&self) -> &sys::nvtxEventAttributes_t {
        &self.raw
    }
}
