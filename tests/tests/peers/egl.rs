//! A headless OpenGL context through EGL, the peer of the CUDA graphics interop tests.
//!
//! `libEGL.so.1` is opened at run time; core EGL functions come from its symbols, and every
//! EGL extension and GL function through `eglGetProcAddress` (falling back to the symbols of
//! `libOpenGL.so.0` or `libGL.so.1` for a GL function it does not give). The display is the
//! EGL device matching a CUDA ordinal where the driver says which one that is, else the
//! surfaceless or default platform. No window system is involved.

#![allow(dead_code)]

use libloading::Library;
use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::Mutex;

type EGLDisplay = *mut c_void;
type EGLConfig = *mut c_void;
type EGLContext = *mut c_void;
type EGLSurface = *mut c_void;
type EGLDeviceEXT = *mut c_void;
type EGLImageKHR = *mut c_void;
type EGLStreamKHR = *mut c_void;
type EGLSyncKHR = *mut c_void;
type EGLint = i32;
type EGLenum = u32;
type EGLBoolean = u32;
type EGLAttrib = isize;
type GLenum = u32;
type GLuint = u32;
type GLint = i32;
type GLsizei = i32;
type GLsizeiptr = isize;
type GLintptr = isize;

/// The 2D texture target.
pub const GL_TEXTURE_2D: u32 = 0x0DE1;
/// The vertex array buffer target.
pub const GL_ARRAY_BUFFER: u32 = 0x8892;
/// The renderbuffer target.
pub const GL_RENDERBUFFER: u32 = 0x8D41;
/// The single-channel 32-bit float internal format.
pub const GL_R32F: u32 = 0x822E;
/// A stream just created, with neither end connected.
pub const EGL_STREAM_STATE_CREATED_KHR: i32 = 0x3215;
/// A stream with one end connected, waiting for the other.
pub const EGL_STREAM_STATE_CONNECTING_KHR: i32 = 0x3216;
/// A connected stream that has carried no frame yet.
pub const EGL_STREAM_STATE_EMPTY_KHR: i32 = 0x3217;
/// A stream holding a frame the consumer has not acquired.
pub const EGL_STREAM_STATE_NEW_FRAME_AVAILABLE_KHR: i32 = 0x3218;
/// A stream whose latest frame the consumer has already acquired.
pub const EGL_STREAM_STATE_OLD_FRAME_AVAILABLE_KHR: i32 = 0x3219;
/// A stream one of whose ends has gone.
pub const EGL_STREAM_STATE_DISCONNECTED_KHR: i32 = 0x321A;

const EGL_FALSE: EGLBoolean = 0;
const EGL_NONE: EGLint = 0x3038;
const EGL_EXTENSIONS: EGLint = 0x3055;
const EGL_RENDERABLE_TYPE: EGLint = 0x3040;
const EGL_OPENGL_BIT: EGLint = 0x0008;
const EGL_SURFACE_TYPE: EGLint = 0x3033;
const EGL_PBUFFER_BIT: EGLint = 0x0001;
const EGL_WIDTH: EGLint = 0x3057;
const EGL_HEIGHT: EGLint = 0x3056;
const EGL_OPENGL_API: EGLenum = 0x30A2;
const EGL_CONTEXT_MAJOR_VERSION: EGLint = 0x3098;
const EGL_CONTEXT_MINOR_VERSION: EGLint = 0x30FB;
const EGL_CONTEXT_OPENGL_PROFILE_MASK: EGLint = 0x30FD;
const EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT: EGLint = 0x0001;
const EGL_CUDA_DEVICE_NV: EGLint = 0x323A;
const EGL_PLATFORM_DEVICE_EXT: EGLenum = 0x313F;
const EGL_PLATFORM_SURFACELESS_MESA: EGLenum = 0x31DD;
const EGL_GL_TEXTURE_2D_KHR: EGLenum = 0x30B1;
const EGL_GL_TEXTURE_LEVEL_KHR: EGLint = 0x30BC;
const EGL_STREAM_STATE_KHR: EGLenum = 0x3214;
const EGL_SYNC_FENCE_KHR: EGLenum = 0x30F9;

const GL_VENDOR: GLenum = 0x1F00;
const GL_RENDERER: GLenum = 0x1F01;
const GL_VERSION: GLenum = 0x1F02;
const GL_DYNAMIC_DRAW: GLenum = 0x88E8;
const GL_PIXEL_PACK_BUFFER: GLenum = 0x88EB;
const GL_PIXEL_UNPACK_BUFFER: GLenum = 0x88EC;
const GL_PACK_ALIGNMENT: GLenum = 0x0D05;
const GL_UNPACK_ALIGNMENT: GLenum = 0x0CF5;
const GL_RED: GLenum = 0x1903;
const GL_FLOAT: GLenum = 0x1406;
const GL_RGBA: GLenum = 0x1908;
const GL_UNSIGNED_BYTE: GLenum = 0x1401;
/// `GL_RGBA8`, the internal format of [`Gl::create_texture_rgba8`].
pub const GL_RGBA8: u32 = 0x8058;
const GL_TEXTURE_MIN_FILTER: GLenum = 0x2801;
const GL_TEXTURE_MAG_FILTER: GLenum = 0x2800;
const GL_TEXTURE_MAX_LEVEL: GLenum = 0x813D;
const GL_NEAREST: GLint = 0x2600;
const GL_TEXTURE_WIDTH: GLenum = 0x1000;
const GL_TEXTURE_HEIGHT: GLenum = 0x1001;
const GL_INVALID_OPERATION: u32 = 0x0502;

/// Declares a table of C functions and its loader. `required` tables fail to load when a
/// lookup gives null; `optional` ones hold `None` there.
macro_rules! functions {
    (required $table:ident { $($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)* }) => {
        #[allow(non_snake_case)]
        struct $table { $($name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)* }
        impl $table {
            fn load(mut lookup: impl FnMut(&str) -> *mut c_void) -> Result<Self, String> {
                Ok(Self { $($name: {
                    let address = lookup(stringify!($name));
                    if address.is_null() {
                        return Err(format!("{} is not exported", stringify!($name)));
                    }
                    // SAFETY: `address` is the entry point of the function of that name, whose
                    // C prototype (from the Khronos headers) is the field's type.
                    unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(address) }
                },)* })
            }
        }
    };
    (optional $table:ident { $($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)* }) => {
        #[allow(non_snake_case)]
        struct $table { $($name: Option<unsafe extern "C" fn($($arg),*) $(-> $ret)?>,)* }
        impl $table {
            fn load(mut lookup: impl FnMut(&str) -> *mut c_void) -> Self {
                Self { $($name: {
                    let address = lookup(stringify!($name));
                    // SAFETY: as for required functions; null stays `None`.
                    (!address.is_null()).then(|| unsafe {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(address)
                    })
                },)* }
            }
        }
    };
}

functions!(required EglFns {
    eglGetError: fn() -> EGLint;
    eglQueryString: fn(EGLDisplay, EGLint) -> *const c_char;
    eglGetDisplay: fn(*mut c_void) -> EGLDisplay;
    eglInitialize: fn(EGLDisplay, *mut EGLint, *mut EGLint) -> EGLBoolean;
    eglTerminate: fn(EGLDisplay) -> EGLBoolean;
    eglBindAPI: fn(EGLenum) -> EGLBoolean;
    eglQueryAPI: fn() -> EGLenum;
    eglChooseConfig: fn(EGLDisplay, *const EGLint, *mut EGLConfig, EGLint, *mut EGLint) -> EGLBoolean;
    eglCreateContext: fn(EGLDisplay, EGLConfig, EGLContext, *const EGLint) -> EGLContext;
    eglDestroyContext: fn(EGLDisplay, EGLContext) -> EGLBoolean;
    eglCreatePbufferSurface: fn(EGLDisplay, EGLConfig, *const EGLint) -> EGLSurface;
    eglDestroySurface: fn(EGLDisplay, EGLSurface) -> EGLBoolean;
    eglMakeCurrent: fn(EGLDisplay, EGLSurface, EGLSurface, EGLContext) -> EGLBoolean;
    eglGetCurrentContext: fn() -> EGLContext;
});

functions!(optional EglExt {
    eglQueryDevicesEXT: fn(EGLint, *mut EGLDeviceEXT, *mut EGLint) -> EGLBoolean;
    eglQueryDeviceAttribEXT: fn(EGLDeviceEXT, EGLint, *mut EGLAttrib) -> EGLBoolean;
    eglQueryDeviceStringEXT: fn(EGLDeviceEXT, EGLint) -> *const c_char;
    eglGetPlatformDisplayEXT: fn(EGLenum, *mut c_void, *const EGLint) -> EGLDisplay;
    eglGetPlatformDisplay: fn(EGLenum, *mut c_void, *const EGLAttrib) -> EGLDisplay;
    eglCreateImageKHR: fn(EGLDisplay, EGLContext, EGLenum, *mut c_void, *const EGLint) -> EGLImageKHR;
    eglDestroyImageKHR: fn(EGLDisplay, EGLImageKHR) -> EGLBoolean;
    eglCreateStreamKHR: fn(EGLDisplay, *const EGLint) -> EGLStreamKHR;
    eglDestroyStreamKHR: fn(EGLDisplay, EGLStreamKHR) -> EGLBoolean;
    eglQueryStreamKHR: fn(EGLDisplay, EGLStreamKHR, EGLenum, *mut EGLint) -> EGLBoolean;
    eglCreateSyncKHR: fn(EGLDisplay, EGLenum, *const EGLint) -> EGLSyncKHR;
    eglDestroySyncKHR: fn(EGLDisplay, EGLSyncKHR) -> EGLBoolean;
});

functions!(required GlFns {
    glGetString: fn(GLenum) -> *const c_char;
    glGetError: fn() -> GLenum;
    glFinish: fn();
    glFlush: fn();
    glPixelStorei: fn(GLenum, GLint);
    glGenBuffers: fn(GLsizei, *mut GLuint);
    glBindBuffer: fn(GLenum, GLuint);
    glBufferData: fn(GLenum, GLsizeiptr, *const c_void, GLenum);
    glGetBufferSubData: fn(GLenum, GLintptr, GLsizeiptr, *mut c_void);
    glDeleteBuffers: fn(GLsizei, *const GLuint);
    glGenTextures: fn(GLsizei, *mut GLuint);
    glBindTexture: fn(GLenum, GLuint);
    glTexParameteri: fn(GLenum, GLenum, GLint);
    glTexImage2D: fn(GLenum, GLint, GLint, GLsizei, GLsizei, GLint, GLenum, GLenum, *const c_void);
    glTexSubImage2D: fn(GLenum, GLint, GLint, GLint, GLsizei, GLsizei, GLenum, GLenum, *const c_void);
    glGetTexLevelParameteriv: fn(GLenum, GLint, GLenum, *mut GLint);
    glGetTexImage: fn(GLenum, GLint, GLenum, GLenum, *mut c_void);
    glDeleteTextures: fn(GLsizei, *const GLuint);
});

functions!(optional GlOpt {
    glTexStorage2D: fn(GLenum, GLsizei, GLenum, GLsizei, GLsizei);
});

/// How many live [`Gl`]s use each initialized display: EGL does not count eglInitialize calls,
/// and displays of one device are one handle, so only the last user terminates it.
static DISPLAY_USERS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// A headless OpenGL context made current on the creating thread: EGL on the device platform,
/// no window system.
pub struct Gl {
    egl: EglFns,
    ext: EglExt,
    gl: GlFns,
    gl_opt: GlOpt,
    display: EGLDisplay,
    context: EGLContext,
    surface: EGLSurface,
    extensions: String,
    origin: String,
    cuda_device: Option<i32>,
    version: (u32, u32),
    _gl_library: Option<Library>,
    _egl_library: Library,
}

// SAFETY: EGL handles are valid on every thread, and the methods issue GL commands only after
// checking that the context is current on the calling thread.
unsafe impl Send for Gl {}

impl Gl {
    /// Opens `libEGL.so.1`, takes the EGL device whose `EGL_CUDA_DEVICE_NV` is `cuda_ordinal`
    /// (else the first hardware device, else the first; else the surfaceless Mesa platform,
    /// else the default display), initializes it, and makes an OpenGL context (4.5 core where
    /// offered) current on this thread, surfaceless or on a 16x16 pbuffer. Err names the step
    /// that failed and why.
    pub fn new(cuda_ordinal: i32) -> Result<Gl, String> {
        // SAFETY: libEGL's initializers have no preconditions.
        let egl_library =
            unsafe { Library::new("libEGL.so.1") }.map_err(|e| format!("cannot open libEGL.so.1: {e}"))?;
        let egl = EglFns::load(|name| symbol(&egl_library, name))?;
        let get_proc = symbol(&egl_library, "eglGetProcAddress");
        if get_proc.is_null() {
            return Err("eglGetProcAddress is not exported by libEGL.so.1".into());
        }
        // SAFETY: eglGetProcAddress has this prototype in egl.h.
        let get_proc = unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_char) -> *mut c_void>(get_proc)
        };
        let proc_address = |name: &str| match CString::new(name) {
            // SAFETY: `name` is a NUL-terminated string that outlives the call.
            Ok(name) => unsafe { get_proc(name.as_ptr()) },
            Err(_) => null_mut(),
        };
        let ext = EglExt::load(|name| {
            let address = proc_address(name);
            if address.is_null() { symbol(&egl_library, name) } else { address }
        });
        let mut gl_library: Option<Library> = None;
        let gl = GlFns::load(|name| {
            let address = proc_address(name);
            if !address.is_null() {
                return address;
            }
            if gl_library.is_none() {
                // SAFETY: as for libEGL.
                gl_library =
                    unsafe { Library::new("libOpenGL.so.0").or_else(|_| Library::new("libGL.so.1")) }.ok();
            }
            gl_library.as_ref().map_or(null_mut(), |library| symbol(library, name))
        })?;
        let gl_opt = GlOpt::load(proc_address);

        // SAFETY: EGL_NO_DISPLAY asks for the client extensions; null when there are none.
        let client = unsafe { owned((egl.eglQueryString)(null_mut(), EGL_EXTENSIONS)) }.unwrap_or_default();
        let mut failures = Vec::new();
        let mut chosen = None;
        let attempts: [&dyn Fn() -> Result<Found, String>; 3] = [
            &|| device_display(&egl, &ext, &client, cuda_ordinal),
            &|| surfaceless_display(&egl, &ext, &client),
            &|| default_display(&egl),
        ];
        for attempt in attempts {
            match attempt().and_then(|(display, origin, cuda)| match initialize(&egl, display) {
                Ok(()) => Ok((display, origin, cuda)),
                Err(why) => Err(format!("{origin}: {why}")),
            }) {
                Ok(found) => {
                    chosen = Some(found);
                    break;
                }
                Err(why) => failures.push(why),
            }
        }
        let Some((display, origin, cuda_device)) = chosen else {
            return Err(format!("no EGL display: {}", failures.join("; ")));
        };
        // SAFETY: `display` is initialized.
        let extensions = unsafe { owned((egl.eglQueryString)(display, EGL_EXTENSIONS)) }.unwrap_or_default();
        // From here on, dropping `this` releases what has been made.
        let mut this = Gl {
            egl,
            ext,
            gl,
            gl_opt,
            display,
            context: null_mut(),
            surface: null_mut(),
            extensions,
            origin,
            cuda_device,
            version: (0, 0),
            _gl_library: gl_library,
            _egl_library: egl_library,
        };
        this.create_context()?;
        this.make_current()?;
        // SAFETY: the context is current; glGetString returns a static string or null.
        let version = unsafe { owned((this.gl.glGetString)(GL_VERSION)) }.unwrap_or_default();
        this.version = parse_version(&version);
        Ok(this)
    }

    /// Binds OpenGL, picks a config and creates the context (and pbuffer where needed).
    fn create_context(&mut self) -> Result<(), String> {
        // SAFETY: EGL_OPENGL_API is a valid API.
        if unsafe { (self.egl.eglBindAPI)(EGL_OPENGL_API) } == EGL_FALSE {
            return Err(self.egl_failure("eglBindAPI(EGL_OPENGL_API)"));
        }
        let surfaceless = self.has_extension("EGL_KHR_surfaceless_context");
        let surface_type = if surfaceless { 0 } else { EGL_PBUFFER_BIT };
        let attributes = [EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT, EGL_SURFACE_TYPE, surface_type, EGL_NONE];
        let mut config = null_mut();
        let mut count = 0;
        // SAFETY: the attribute list ends with EGL_NONE; room for one config.
        let chosen = unsafe {
            (self.egl.eglChooseConfig)(self.display, attributes.as_ptr(), &mut config, 1, &mut count)
        };
        if chosen == EGL_FALSE {
            return Err(self.egl_failure("eglChooseConfig"));
        }
        if count < 1 {
            return Err("eglChooseConfig found no config rendering OpenGL".into());
        }
        #[rustfmt::skip]
        let gl45 = [
            EGL_CONTEXT_MAJOR_VERSION, 4, EGL_CONTEXT_MINOR_VERSION, 5,
            EGL_CONTEXT_OPENGL_PROFILE_MASK, EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT, EGL_NONE,
        ];
        // SAFETY: `config` belongs to the display; the attribute lists end with EGL_NONE.
        self.context =
            unsafe { (self.egl.eglCreateContext)(self.display, config, null_mut(), gl45.as_ptr()) };
        if self.context.is_null() {
            let why = self.egl_failure("eglCreateContext(OpenGL 4.5 core)");
            // SAFETY: as above.
            self.context =
                unsafe { (self.egl.eglCreateContext)(self.display, config, null_mut(), [EGL_NONE].as_ptr()) };
            if self.context.is_null() {
                return Err(format!("{why}; {}", self.egl_failure("eglCreateContext(no version)")));
            }
        }
        if !surfaceless {
            let size = [EGL_WIDTH, 16, EGL_HEIGHT, 16, EGL_NONE];
            // SAFETY: the config has EGL_PBUFFER_BIT; the list ends with EGL_NONE.
            self.surface = unsafe { (self.egl.eglCreatePbufferSurface)(self.display, config, size.as_ptr()) };
            if self.surface.is_null() {
                return Err(self.egl_failure("eglCreatePbufferSurface"));
            }
        }
        Ok(())
    }

    /// GL_VENDOR / GL_RENDERER / GL_VERSION joined, and which EGL display holds the context.
    pub fn describe(&self) -> String {
        if !self.is_current() {
            return format!("OpenGL context not current on this thread ({})", self.origin);
        }
        let strings: Vec<String> = [GL_VENDOR, GL_RENDERER, GL_VERSION]
            .iter()
            // SAFETY: the context is current; glGetString returns a static string or null.
            .map(|&name| unsafe { owned((self.gl.glGetString)(name)) }.unwrap_or_else(|| "?".into()))
            .collect();
        format!("{} ({})", strings.join(" / "), self.origin)
    }

    /// The CUDA ordinal the chosen EGL device reports (EGL_NV_device_cuda), if any.
    pub fn cuda_device(&self) -> Option<i32> {
        self.cuda_device
    }

    /// Makes the context current on the calling thread (binding the OpenGL API there).
    pub fn make_current(&self) -> Result<(), String> {
        // SAFETY: the display is initialized; the context and surface (or none) belong to it.
        unsafe {
            if (self.egl.eglBindAPI)(EGL_OPENGL_API) == EGL_FALSE {
                return Err(self.egl_failure("eglBindAPI(EGL_OPENGL_API)"));
            }
            if (self.egl.eglMakeCurrent)(self.display, self.surface, self.surface, self.context) == EGL_FALSE
            {
                return Err(self.egl_failure("eglMakeCurrent"));
            }
        }
        Ok(())
    }

    /// Releases the context from the calling thread; nothing when it is not current here.
    pub fn release_current(&self) -> Result<(), String> {
        if !self.is_current() {
            return Ok(());
        }
        // SAFETY: releasing with no surfaces and no context is always valid.
        if unsafe { (self.egl.eglMakeCurrent)(self.display, null_mut(), null_mut(), null_mut()) } == EGL_FALSE
        {
            return Err(self.egl_failure("eglMakeCurrent(EGL_NO_CONTEXT)"));
        }
        Ok(())
    }

    /// A GL_ARRAY_BUFFER holding `bytes` (GL_DYNAMIC_DRAW); returns its name.
    pub fn create_buffer(&self, bytes: &[u8]) -> Result<u32, String> {
        self.begin("create_buffer")?;
        let size = GLsizeiptr::try_from(bytes.len()).map_err(|_| "buffer too large for GL")?;
        let mut name = 0;
        // SAFETY: the context is current; one name is written to `name`.
        unsafe { (self.gl.glGenBuffers)(1, &mut name) };
        self.check("glGenBuffers")?;
        // SAFETY: `bytes` holds `size` bytes; GL copies them before returning.
        unsafe {
            (self.gl.glBindBuffer)(GL_ARRAY_BUFFER, name);
            (self.gl.glBufferData)(GL_ARRAY_BUFFER, size, bytes.as_ptr().cast(), GL_DYNAMIC_DRAW);
        }
        let result = self.check("glBufferData");
        // SAFETY: unbinding is always valid.
        unsafe { (self.gl.glBindBuffer)(GL_ARRAY_BUFFER, 0) };
        result.inspect_err(|_| self.delete_buffer(name)).map(|()| name)
    }

    /// `len` bytes of buffer `name` from offset 0 (glGetBufferSubData), after glFinish.
    pub fn read_buffer(&self, name: u32, len: usize) -> Result<Vec<u8>, String> {
        self.begin("read_buffer")?;
        let size = GLsizeiptr::try_from(len).map_err(|_| "length too large for GL")?;
        let mut bytes = vec![0u8; len];
        // SAFETY: the context is current; GL writes at most `size` bytes into `bytes`, and
        // none when the range exceeds the buffer (GL_INVALID_VALUE).
        unsafe {
            (self.gl.glFinish)();
            (self.gl.glBindBuffer)(GL_ARRAY_BUFFER, name);
            (self.gl.glGetBufferSubData)(GL_ARRAY_BUFFER, 0, size, bytes.as_mut_ptr().cast());
        }
        let result = self.check("glGetBufferSubData");
        // SAFETY: unbinding is always valid.
        unsafe { (self.gl.glBindBuffer)(GL_ARRAY_BUFFER, 0) };
        result.map(|()| bytes)
    }

    /// glDeleteBuffers; nothing when the context is not current here.
    pub fn delete_buffer(&self, name: u32) {
        if self.is_current() {
            // SAFETY: one name is read from `name`.
            unsafe { (self.gl.glDeleteBuffers)(1, &name) };
        }
    }

    /// A GL_TEXTURE_2D of format GL_R32F with `levels` mipmap levels (immutable storage where
    /// GL 4.2 is there), level 0 filled from `data` (`width * height` floats, row after row),
    /// NEAREST filters; returns its name.
    pub fn create_texture_r32f(
        &self,
        width: u32,
        height: u32,
        levels: u32,
        data: &[f32],
    ) -> Result<u32, String> {
        let pixels = (GL_R32F, GL_RED, GL_FLOAT, data.as_ptr().cast());
        self.create_texture("create_texture_r32f", (width, height, levels), data.len(), pixels)
    }

    /// A GL_TEXTURE_2D of format GL_RGBA8 with one level, filled from `data` (one `u32` of
    /// R, G, B, A bytes in memory order per texel); returns its name.
    pub fn create_texture_rgba8(&self, width: u32, height: u32, data: &[u32]) -> Result<u32, String> {
        let pixels = (GL_RGBA8, GL_RGBA, GL_UNSIGNED_BYTE, data.as_ptr().cast());
        self.create_texture("create_texture_rgba8", (width, height, 1), data.len(), pixels)
    }

    /// A new texture of `levels` levels, level 0 filled from `texels` 4-byte texels at
    /// `pixels` (see [`fill_texture`](Self::fill_texture)); returns its name.
    fn create_texture(
        &self,
        operation: &str,
        (width, height, levels): (u32, u32, u32),
        texels: usize,
        pixels: (GLenum, GLenum, GLenum, *const c_void),
    ) -> Result<u32, String> {
        self.begin(operation)?;
        let (w, h, count) = level_extent(width, height, levels, 0)?;
        if texels != count {
            return Err(format!("a {width}x{height} texture needs {count} texels, got {texels}"));
        }
        let levels = GLint::try_from(levels).map_err(|_| "too many levels")?;
        let mut name = 0;
        // SAFETY: the context is current; one name is written to `name`.
        unsafe { (self.gl.glGenTextures)(1, &mut name) };
        self.check("glGenTextures")?;
        let result = self.fill_texture(name, (w, h), levels, pixels);
        // SAFETY: unbinding is always valid.
        unsafe { (self.gl.glBindTexture)(GL_TEXTURE_2D, 0) };
        result.inspect_err(|_| self.delete_texture(name)).map(|()| name)
    }

    /// Allocates `levels` levels of texture `name` in `internal` format and fills level 0 from
    /// `pixels` (of `format` and `kind`, `w` by `h`).
    fn fill_texture(
        &self,
        name: u32,
        (w, h): (GLsizei, GLsizei),
        levels: GLint,
        (internal, format, kind, pixels): (GLenum, GLenum, GLenum, *const c_void),
    ) -> Result<(), String> {
        // SAFETY: the context is current; every call below reads only plain values.
        unsafe {
            (self.gl.glBindTexture)(GL_TEXTURE_2D, name);
            (self.gl.glTexParameteri)(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
            (self.gl.glTexParameteri)(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
            (self.gl.glTexParameteri)(GL_TEXTURE_2D, GL_TEXTURE_MAX_LEVEL, levels - 1);
            (self.gl.glBindBuffer)(GL_PIXEL_UNPACK_BUFFER, 0);
            (self.gl.glPixelStorei)(GL_UNPACK_ALIGNMENT, 4);
        }
        self.check("glTexParameteri")?;
        match self.gl_opt.glTexStorage2D.filter(|_| self.version >= (4, 2)) {
            Some(storage) => {
                // SAFETY: plain values; allocates every level.
                unsafe { storage(GL_TEXTURE_2D, levels, internal, w, h) };
                self.check("glTexStorage2D")?;
            }
            None => {
                let tex_image = self.gl.glTexImage2D;
                for level in 0..levels {
                    let (lw, lh) = ((w >> level).max(1), (h >> level).max(1));
                    // SAFETY: a null pixel pointer only allocates the level; level 0 is filled below.
                    unsafe {
                        tex_image(GL_TEXTURE_2D, level, internal as GLint, lw, lh, 0, format, kind, null())
                    };
                    self.check("glTexImage2D")?;
                }
            }
        }
        // SAFETY: `pixels` holds w * h texels of 4 bytes, rows 4-byte aligned as
        // GL_UNPACK_ALIGNMENT says.
        unsafe { (self.gl.glTexSubImage2D)(GL_TEXTURE_2D, 0, 0, 0, w, h, format, kind, pixels) };
        self.check("glTexSubImage2D")
    }

    /// The floats of level `level` (glGetTexImage GL_RED GL_FLOAT), after glFinish. `width`
    /// and `height` are that level's own size; Err when GL reports another.
    pub fn read_texture_r32f(
        &self,
        name: u32,
        level: u32,
        width: u32,
        height: u32,
    ) -> Result<Vec<f32>, String> {
        let (_, _, count) = level_extent(width, height, 1, 0)?;
        let mut floats = vec![0f32; count];
        self.read_level(name, level, (width, height), (GL_RED, GL_FLOAT), floats.as_mut_ptr().cast())?;
        Ok(floats)
    }

    /// Reads level `level` of texture `name`, which must be `width` by `height`, into `out`
    /// as `format` and `kind` (4 bytes a texel).
    fn read_level(
        &self,
        name: u32,
        level: u32,
        (width, height): (u32, u32),
        (format, kind): (GLenum, GLenum),
        out: *mut c_void,
    ) -> Result<(), String> {
        self.begin("read_texture")?;
        let level = GLint::try_from(level).map_err(|_| "level out of range")?;
        let (mut w, mut h) = (0, 0);
        // SAFETY: the context is current; one int is written to each of `w` and `h`.
        unsafe {
            (self.gl.glFinish)();
            (self.gl.glBindTexture)(GL_TEXTURE_2D, name);
            (self.gl.glGetTexLevelParameteriv)(GL_TEXTURE_2D, level, GL_TEXTURE_WIDTH, &mut w);
            (self.gl.glGetTexLevelParameteriv)(GL_TEXTURE_2D, level, GL_TEXTURE_HEIGHT, &mut h);
        }
        let result = self.check("glGetTexLevelParameteriv").and_then(|()| {
            if i64::from(w) != i64::from(width) || i64::from(h) != i64::from(height) {
                return Err(format!("level {level} of texture {name} is {w}x{h}, not {width}x{height}"));
            }
            // SAFETY: the caller's `out` holds width * height texels of 4 bytes, rows 4-byte
            // aligned as GL_PACK_ALIGNMENT says, written to client memory as no pack buffer is
            // bound.
            unsafe {
                (self.gl.glBindBuffer)(GL_PIXEL_PACK_BUFFER, 0);
                (self.gl.glPixelStorei)(GL_PACK_ALIGNMENT, 4);
                (self.gl.glGetTexImage)(GL_TEXTURE_2D, level, format, kind, out);
            }
            self.check("glGetTexImage")
        });
        // SAFETY: unbinding is always valid.
        unsafe { (self.gl.glBindTexture)(GL_TEXTURE_2D, 0) };
        result
    }

    /// glDeleteTextures; nothing when the context is not current here.
    pub fn delete_texture(&self, name: u32) {
        if self.is_current() {
            // SAFETY: one name is read from `name`.
            unsafe { (self.gl.glDeleteTextures)(1, &name) };
        }
    }

    /// glFinish; nothing when the context is not current here.
    pub fn finish(&self) {
        if self.is_current() {
            // SAFETY: the context is current.
            unsafe { (self.gl.glFinish)() };
        }
    }

    /// glGetError; GL_INVALID_OPERATION (0x0502) when the context is not current here.
    pub fn error(&self) -> u32 {
        if !self.is_current() {
            return GL_INVALID_OPERATION;
        }
        // SAFETY: the context is current.
        unsafe { (self.gl.glGetError)() }
    }

    /// The EGLDisplay.
    pub fn display(&self) -> *mut c_void {
        self.display
    }

    /// The EGLContext.
    pub fn context(&self) -> *mut c_void {
        self.context
    }

    /// Whether the display lists EGL extension `name`.
    pub fn has_extension(&self, name: &str) -> bool {
        self.extensions.split_whitespace().any(|e| e == name)
    }

    /// An EGLImage of level 0 of 2D texture `texture` of this context (eglCreateImageKHR,
    /// EGL_GL_TEXTURE_2D_KHR). Err when EGL_KHR_gl_texture_2D_image is missing or the call fails.
    pub fn create_image_from_texture(&self, texture: u32) -> Result<*mut c_void, String> {
        let create = self.extension_fn("EGL_KHR_gl_texture_2D_image", self.ext.eglCreateImageKHR)?;
        let attributes = [EGL_GL_TEXTURE_LEVEL_KHR, 0, EGL_NONE];
        // SAFETY: a GL texture name travels as the client buffer pointer, as the extension says;
        // the attribute list ends with EGL_NONE.
        let image = unsafe {
            create(
                self.display,
                self.context,
                EGL_GL_TEXTURE_2D_KHR,
                std::ptr::without_provenance_mut(texture as usize),
                attributes.as_ptr(),
            )
        };
        if image.is_null() {
            return Err(self.egl_failure("eglCreateImageKHR(EGL_GL_TEXTURE_2D_KHR)"));
        }
        Ok(image)
    }

    /// eglDestroyImageKHR.
    pub fn destroy_image(&self, image: *mut c_void) {
        if let Some(destroy) = self.ext.eglDestroyImageKHR {
            // SAFETY: EGL checks the handle against the display.
            unsafe { destroy(self.display, image) };
        }
    }

    /// A new EGLStream of no attributes (eglCreateStreamKHR). Err when EGL_KHR_stream is
    /// missing or the call fails.
    pub fn create_stream(&self) -> Result<*mut c_void, String> {
        let create = self.extension_fn("EGL_KHR_stream", self.ext.eglCreateStreamKHR)?;
        // SAFETY: the attribute list ends with EGL_NONE.
        let stream = unsafe { create(self.display, [EGL_NONE].as_ptr()) };
        if stream.is_null() {
            return Err(self.egl_failure("eglCreateStreamKHR"));
        }
        Ok(stream)
    }

    /// eglDestroyStreamKHR.
    pub fn destroy_stream(&self, stream: *mut c_void) {
        if let Some(destroy) = self.ext.eglDestroyStreamKHR {
            // SAFETY: EGL checks the handle against the display.
            unsafe { destroy(self.display, stream) };
        }
    }

    /// The stream's EGL_STREAM_STATE_KHR (one of the `EGL_STREAM_STATE_*` constants).
    pub fn stream_state(&self, stream: *mut c_void) -> Result<i32, String> {
        let query = self.extension_fn("EGL_KHR_stream", self.ext.eglQueryStreamKHR)?;
        let mut state = 0;
        // SAFETY: EGL checks the handle; one int is written to `state`.
        if unsafe { query(self.display, stream, EGL_STREAM_STATE_KHR, &mut state) } == EGL_FALSE {
            return Err(self.egl_failure("eglQueryStreamKHR(EGL_STREAM_STATE_KHR)"));
        }
        Ok(state)
    }

    /// An EGL fence sync after the GL commands issued so far (eglCreateSyncKHR
    /// EGL_SYNC_FENCE_KHR, then glFlush so that it gets signaled). Err when EGL_KHR_fence_sync
    /// is missing, the context is not current here, or the call fails.
    pub fn create_fence_sync(&self) -> Result<*mut c_void, String> {
        let create = self.extension_fn("EGL_KHR_fence_sync", self.ext.eglCreateSyncKHR)?;
        self.begin("create_fence_sync")?;
        // SAFETY: the context of this display is current; the list ends with EGL_NONE.
        let sync = unsafe { create(self.display, EGL_SYNC_FENCE_KHR, [EGL_NONE].as_ptr()) };
        if sync.is_null() {
            return Err(self.egl_failure("eglCreateSyncKHR(EGL_SYNC_FENCE_KHR)"));
        }
        // SAFETY: the context is current.
        unsafe { (self.gl.glFlush)() };
        Ok(sync)
    }

    /// eglDestroySyncKHR.
    pub fn destroy_sync(&self, sync: *mut c_void) {
        if let Some(destroy) = self.ext.eglDestroySyncKHR {
            // SAFETY: EGL checks the handle against the display.
            unsafe { destroy(self.display, sync) };
        }
    }

    fn extension_fn<F>(&self, extension: &str, function: Option<F>) -> Result<F, String> {
        if !self.has_extension(extension) {
            return Err(format!("the EGL display lacks {extension}"));
        }
        function.ok_or_else(|| format!("eglGetProcAddress gives no function of {extension}"))
    }

    fn is_current(&self) -> bool {
        // SAFETY: both queries take no arguments and read thread state only.
        unsafe {
            (self.egl.eglQueryAPI)() == EGL_OPENGL_API && (self.egl.eglGetCurrentContext)() == self.context
        }
    }

    /// Checks that the context is current here, and clears stale GL errors.
    fn begin(&self, what: &str) -> Result<(), String> {
        if !self.is_current() {
            return Err(format!("{what}: the OpenGL context is not current on this thread"));
        }
        // Bounded: a lost context may report errors forever.
        for _ in 0..32 {
            // SAFETY: the context is current.
            if unsafe { (self.gl.glGetError)() } == 0 {
                break;
            }
        }
        Ok(())
    }

    fn check(&self, call: &str) -> Result<(), String> {
        match self.error() {
            0 => Ok(()),
            code => Err(format!("{call} failed: GL error 0x{code:04X} ({})", gl_error_name(code))),
        }
    }

    fn egl_failure(&self, call: &str) -> String {
        egl_failure(&self.egl, call)
    }
}

impl Drop for Gl {
    fn drop(&mut self) {
        // SAFETY: the handles belong to the display, which stays initialized until the last
        // user's `release_display`; null handles were never made.
        unsafe {
            if self.is_current() {
                (self.egl.eglMakeCurrent)(self.display, null_mut(), null_mut(), null_mut());
            }
            if !self.surface.is_null() {
                (self.egl.eglDestroySurface)(self.display, self.surface);
            }
            if !self.context.is_null() {
                (self.egl.eglDestroyContext)(self.display, self.context);
            }
        }
        let mut users = DISPLAY_USERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(i) = users.iter().position(|&(display, _)| display == self.display as usize) {
            users[i].1 -= 1;
            if users[i].1 == 0 {
                users.swap_remove(i);
                // SAFETY: no other Gl uses the display.
                unsafe { (self.egl.eglTerminate)(self.display) };
            }
        }
    }
}

/// A display, where it comes from, and the CUDA ordinal of its device if known.
type Found = (EGLDisplay, String, Option<i32>);

/// The EGL device of CUDA device `cuda_ordinal` where one says so, else the first hardware
/// device, else the first.
fn device_display(egl: &EglFns, ext: &EglExt, client: &str, cuda_ordinal: i32) -> Result<Found, String> {
    let listed = |name: &str| client.split_whitespace().any(|e| e == name);
    let (Some(query_devices), Some(platform_display), true, true) = (
        ext.eglQueryDevicesEXT,
        ext.eglGetPlatformDisplayEXT,
        listed("EGL_EXT_device_enumeration") || listed("EGL_EXT_device_base"),
        listed("EGL_EXT_platform_device"),
    ) else {
        return Err("device platform: EGL_EXT_device_enumeration or EGL_EXT_platform_device missing".into());
    };
    let mut count = 0;
    // SAFETY: a null array with size 0 asks for the number of devices only.
    if unsafe { query_devices(0, null_mut(), &mut count) } == EGL_FALSE {
        return Err(egl_failure(egl, "device platform: eglQueryDevicesEXT"));
    }
    let mut devices = vec![null_mut(); usize::try_from(count).unwrap_or(0)];
    // SAFETY: `devices` has room for `count` handles.
    if unsafe { query_devices(count, devices.as_mut_ptr(), &mut count) } == EGL_FALSE {
        return Err(egl_failure(egl, "device platform: eglQueryDevicesEXT"));
    }
    devices.truncate(usize::try_from(count).unwrap_or(0));
    // Per device: its CUDA ordinal where reported, and whether it is a software renderer.
    let described: Vec<(Option<i32>, bool)> = devices
        .iter()
        .map(|&device| {
            let extensions = ext
                .eglQueryDeviceStringEXT
                // SAFETY: `device` came from eglQueryDevicesEXT; the string is static or null.
                .and_then(|query| unsafe { owned(query(device, EGL_EXTENSIONS)) })
                .unwrap_or_default();
            let has = |name: &str| extensions.split_whitespace().any(|e| e == name);
            let mut value: EGLAttrib = -1;
            let cuda = match ext.eglQueryDeviceAttribEXT {
                Some(query) if has("EGL_NV_device_cuda") => {
                    // SAFETY: as above; the attribute is written to `value` on success.
                    let found = unsafe { query(device, EGL_CUDA_DEVICE_NV, &mut value) } != EGL_FALSE;
                    found.then(|| i32::try_from(value).ok()).flatten()
                }
                _ => None,
            };
            (cuda, has("EGL_MESA_device_software"))
        })
        .collect();
    let index = described
        .iter()
        .position(|&(cuda, _)| cuda == Some(cuda_ordinal))
        .or_else(|| described.iter().position(|&(_, software)| !software))
        .or((!devices.is_empty()).then_some(0))
        .ok_or("device platform: eglQueryDevicesEXT lists no device")?;
    // SAFETY: the device handle is the native display of the device platform.
    let display = unsafe { platform_display(EGL_PLATFORM_DEVICE_EXT, devices[index], null()) };
    if display.is_null() {
        return Err(egl_failure(egl, "device platform: eglGetPlatformDisplayEXT"));
    }
    let cuda = described[index].0;
    let origin = match cuda {
        Some(ordinal) => format!("EGL device {index} of {}, CUDA device {ordinal}", devices.len()),
        None => format!("EGL device {index} of {}, no CUDA ordinal reported", devices.len()),
    };
    Ok((display, origin, cuda))
}

fn surfaceless_display(egl: &EglFns, ext: &EglExt, client: &str) -> Result<Found, String> {
    if !client.split_whitespace().any(|e| e == "EGL_MESA_platform_surfaceless") {
        return Err("surfaceless platform: EGL_MESA_platform_surfaceless missing".into());
    }
    let display = match (ext.eglGetPlatformDisplay, ext.eglGetPlatformDisplayEXT) {
        // SAFETY: the surfaceless platform takes EGL_DEFAULT_DISPLAY and no attributes.
        (Some(get), _) => unsafe { get(EGL_PLATFORM_SURFACELESS_MESA, null_mut(), null()) },
        // SAFETY: as above.
        (None, Some(get)) => unsafe { get(EGL_PLATFORM_SURFACELESS_MESA, null_mut(), null()) },
        (None, None) => return Err("surfaceless platform: eglGetPlatformDisplay is not exported".into()),
    };
    if display.is_null() {
        return Err(egl_failure(egl, "surfaceless platform: eglGetPlatformDisplay"));
    }
    Ok((display, "Mesa surfaceless platform".into(), None))
}

fn default_display(egl: &EglFns) -> Result<Found, String> {
    // SAFETY: EGL_DEFAULT_DISPLAY is a valid native display.
    let display = unsafe { (egl.eglGetDisplay)(null_mut()) };
    if display.is_null() {
        return Err(egl_failure(egl, "default display: eglGetDisplay(EGL_DEFAULT_DISPLAY)"));
    }
    Ok((display, "EGL default display".into(), None))
}

/// eglInitialize, counting the display's users.
fn initialize(egl: &EglFns, display: EGLDisplay) -> Result<(), String> {
    let mut users = DISPLAY_USERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (mut major, mut minor) = (0, 0);
    // SAFETY: `display` came from eglGet*Display; the version is written to two ints.
    if unsafe { (egl.eglInitialize)(display, &mut major, &mut minor) } == EGL_FALSE {
        return Err(egl_failure(egl, "eglInitialize"));
    }
    match users.iter_mut().find(|(d, _)| *d == display as usize) {
        Some((_, count)) => *count += 1,
        None => users.push((display as usize, 1)),
    }
    Ok(())
}

/// The address of `name` in `library`, or null.
fn symbol(library: &Library, name: &str) -> *mut c_void {
    let Ok(name) = CString::new(name) else { return null_mut() };
    // SAFETY: the symbol's address is only read, as a pointer.
    unsafe { library.get::<*mut c_void>(name.as_bytes_with_nul()) }.map_or(null_mut(), |address| *address)
}

/// A copy of a C string, None for null.
///
/// # Safety
/// `text` is null or a NUL-terminated string valid for the call.
unsafe fn owned(text: *const c_char) -> Option<String> {
    // SAFETY: as the caller promises.
    (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

/// `width` x `height` at `level` (each halved per level, at least 1) as GL sizes, and its
/// float count; Err for an empty size or more levels than the size allows.
fn level_extent(
    width: u32,
    height: u32,
    levels: u32,
    level: u32,
) -> Result<(GLsizei, GLsizei, usize), String> {
    let most = 32 - width.max(height).leading_zeros();
    if width == 0 || height == 0 || levels == 0 || levels > most {
        return Err(format!("a {width}x{height} texture cannot have {levels} levels"));
    }
    let (w, h) = ((width >> level).max(1), (height >> level).max(1));
    let count = (w as usize).checked_mul(h as usize).ok_or("texture too large")?;
    let w = GLsizei::try_from(w).map_err(|_| "texture too wide for GL")?;
    let h = GLsizei::try_from(h).map_err(|_| "texture too tall for GL")?;
    Ok((w, h, count))
}

/// Major and minor from a GL_VERSION string ("4.5.0 NVIDIA 550.54", "4.5 (Core Profile) Mesa").
fn parse_version(version: &str) -> (u32, u32) {
    let mut numbers = version.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse().unwrap_or(0));
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
}

fn egl_failure(egl: &EglFns, call: &str) -> String {
    // SAFETY: eglGetError takes no arguments.
    let code = unsafe { (egl.eglGetError)() };
    let name = match code {
        0x3000 => "EGL_SUCCESS",
        0x3001 => "EGL_NOT_INITIALIZED",
        0x3002 => "EGL_BAD_ACCESS",
        0x3003 => "EGL_BAD_ALLOC",
        0x3004 => "EGL_BAD_ATTRIBUTE",
        0x3005 => "EGL_BAD_CONFIG",
        0x3006 => "EGL_BAD_CONTEXT",
        0x3007 => "EGL_BAD_CURRENT_SURFACE",
        0x3008 => "EGL_BAD_DISPLAY",
        0x3009 => "EGL_BAD_MATCH",
        0x300A => "EGL_BAD_NATIVE_PIXMAP",
        0x300B => "EGL_BAD_NATIVE_WINDOW",
        0x300C => "EGL_BAD_PARAMETER",
        0x300D => "EGL_BAD_SURFACE",
        0x300E => "EGL_CONTEXT_LOST",
        0x321B => "EGL_BAD_STREAM_KHR",
        0x321C => "EGL_BAD_STATE_KHR",
        0x322B => "EGL_BAD_DEVICE_EXT",
        _ => "unknown",
    };
    format!("{call} failed: EGL error 0x{code:04X} ({name})")
}

fn gl_error_name(code: u32) -> &'static str {
    match code {
        0x0500 => "GL_INVALID_ENUM",
        0x0501 => "GL_INVALID_VALUE",
        0x0502 => "GL_INVALID_OPERATION",
        0x0503 => "GL_STACK_OVERFLOW",
        0x0504 => "GL_STACK_UNDERFLOW",
        0x0505 => "GL_OUT_OF_MEMORY",
        0x0506 => "GL_INVALID_FRAMEBUFFER_OPERATION",
        0x0507 => "GL_CONTEXT_LOST",
        _ => "unknown",
    }
}
