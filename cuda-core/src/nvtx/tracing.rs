//! A [`tracing_subscriber`] layer that turns spans into NVTX ranges (feature `tracing`).
//!
//! Entering a span pushes a thread range named after it (with its fields), exiting pops it,
//! so `#[tracing::instrument]`ed functions show up on the Nsight timeline. Optionally, events
//! become NVTX marks.
//!
//! ```
//! use tracing_subscriber::prelude::*;
//! tracing_subscriber::registry().with(cuhost::nvtx::tracing::NvtxLayer::new()).init();
//! let _span = tracing::info_span!("forward", layer = 3).entered(); // an NVTX range "forward layer=3"
//! ```

use super::{Domain, EventAttributes};
use cuhost_nvtx_sys as sys;
use std::ffi::CString;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Spans as NVTX thread ranges, in the default domain or in a [`Domain`] of their own.
#[derive(Debug, Default)]
pub struct NvtxLayer {
    domain: Option<Domain>,
    events: bool,
}

impl NvtxLayer {
    /// Spans become ranges of the default domain; events are not recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts the ranges (and marks) in `domain`.
    pub fn with_domain(mut self, domain: Domain) -> Self {
        self.domain = Some(domain);
        self
    }

    /// Whether events become NVTX marks (`nvtxMarkA`) carrying their fields.
    pub fn with_events(mut self, events: bool) -> Self {
        self.events = events;
        self
    }

    fn push(&self, message: &CString) {
        match &self.domain {
            Some(domain) => {
                let attributes = EventAttributes::new().message(message);
                // SAFETY: a live domain and attributes whose message lives through the call.
                unsafe { sys::nvtxDomainRangePushEx(domain.as_raw(), attributes.as_raw()) };
            }
            // SAFETY: a NUL-terminated string that lives through the call.
            None => unsafe {
                sys::nvtxRangePushA(message.as_ptr());
            },
        }
    }

    fn pop(&self) {
        match &self.domain {
            // SAFETY: pops the range `on_enter` pushed on this thread in this domain.
            Some(domain) => unsafe {
                sys::nvtxDomainRangePop(domain.as_raw());
            },
            // SAFETY: pops the range `on_enter` pushed on this thread.
            None => unsafe {
                sys::nvtxRangePop();
            },
        }
    }
}

/// The range name kept in a span's extensions: its name followed by its fields.
struct RangeName(CString);

/// Appends ` key=value` per field; the `message` field of events comes without its key.
struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

fn c_string(mut text: String) -> CString {
    if let Some(nul) = text.find('\0') {
        text.truncate(nul);
    }
    CString::new(text).unwrap_or_default()
}

impl<S> Layer<S> for NvtxLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut text = attrs.metadata().name().to_string();
        attrs.record(&mut Fields(&mut text));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(RangeName(c_string(text)));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(RangeName(name)) = extensions.get_mut::<RangeName>() {
            let mut text = name.to_string_lossy().into_owned();
            values.record(&mut Fields(&mut text));
            *name = c_string(text);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let extensions = span.extensions();
        match extensions.get::<RangeName>() {
            Some(RangeName(name)) => self.push(name),
            None => self.push(&c_string(span.name().to_string())),
        }
    }

    fn on_exit(&self, _id: &Id, _ctx: Context<'_, S>) {
        self.pop();
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if !self.events {
            return;
        }
        let mut text = event.metadata().target().to_string();
        text.push(':');
        event.record(&mut Fields(&mut text));
        let text = c_string(text);
        match &self.domain {
            Some(domain) => domain.mark_with(&EventAttributes::new().message(&text)),
            None => super::mark(text.as_c_str()),
        }
    }
}
