"""sluice_static_library: one archive of the project's own code, for embedders outside Bazel.

Bazel 4 has no rule that merges a library and its dependencies into one archive, so this one reads
the archives of every cc_library below `deps` (the project's own, not the Debian wrappers: those
have no archive, only link flags) and merges them with `ar` (an MRI script) into lib<name>.a. It
also writes what an embedder's build needs next to it:

  <name>.link_flags   the link flags of the Debian libraries below (one per line, in link order:
                      -lnghttp2, the TLS library, abseil, -pthread), for the .pc and CMake files
  <name>.headers      the project's headers below `deps` (one path per line), shipped as runfiles;
                      the installer copies those that the public headers reach
  <name>.public_headers  `public_headers`, one path per line: where the installer starts

PIC objects are preferred (embedders' executables are PIE by default on Debian).
"""

def _main_repo(f):
    return f.owner != None and f.owner.workspace_root == ""

def _sluice_static_library_impl(ctx):
    archives = []
    seen = {}
    flags = []
    seen_flags = {}
    headers = []
    for dep in ctx.attr.deps:
        cc = dep[CcInfo]
        for linker_input in cc.linking_context.linker_inputs.to_list():
            for lib in linker_input.libraries:
                archive = lib.pic_static_library or lib.static_library
                if archive != None and _main_repo(archive) and archive.path not in seen:
                    seen[archive.path] = True
                    archives.append(archive)
            for flag in linker_input.user_link_flags:
                if flag not in seen_flags:
                    seen_flags[flag] = True
                    flags.append(flag)
        headers += [h for h in cc.compilation_context.headers.to_list() if _main_repo(h)]

    out = ctx.actions.declare_file("lib%s.a" % ctx.attr.name)
    script = ctx.actions.declare_file("%s.mri" % ctx.attr.name)
    ctx.actions.write(
        script,
        "CREATE %s\n" % out.path + "".join(["ADDLIB %s\n" % a.path for a in archives]) +
        "SAVE\nEND\n",
    )
    ctx.actions.run_shell(
        inputs = archives + [script],
        outputs = [out],
        command = "ar -M < {script} && ranlib {out}".format(script = script.path, out = out.path),
        mnemonic = "SluiceStaticLibrary",
        progress_message = "Merging %d archives into %s" % (len(archives), out.short_path),
    )

    link_flags = ctx.actions.declare_file("%s.link_flags" % ctx.attr.name)
    ctx.actions.write(link_flags, "".join([f + "\n" for f in flags]))
    header_list = ctx.actions.declare_file("%s.headers" % ctx.attr.name)
    ctx.actions.write(header_list, "".join([h.short_path + "\n" for h in headers]))
    public = ctx.actions.declare_file("%s.public_headers" % ctx.attr.name)
    ctx.actions.write(public, "".join([f.short_path + "\n" for f in ctx.files.public_headers]))

    files = [out, link_flags, header_list, public]
    return [DefaultInfo(
        files = depset(files),
        runfiles = ctx.runfiles(files = files + headers),
    )]

sluice_static_library = rule(
    implementation = _sluice_static_library_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo], doc = "the libraries to ship"),
        "public_headers": attr.label_list(
            allow_files = [".h"],
            doc = "the headers embedders include (bazel/public_headers.bzl)",
        ),
    },
    doc = "lib<name>.a holding `deps` and the project's libraries below them (see the file).",
)
