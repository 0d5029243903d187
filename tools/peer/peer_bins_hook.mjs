// Module resolution hook of llama_peer.mjs (node:module register): "@node-llama-cpp/linux-x64",
// the prebuilt binaries package that node-llama-cpp imports, resolves to the mirror of it that
// llama_peer.mjs prepared (the same files without the CPU variants the peer must not use).
let target = null;
export async function initialize(data) {
    target = data.target;
}
export async function resolve(specifier, context, next) {
    if (target && specifier === "@node-llama-cpp/linux-x64") return { url: target, shortCircuit: true };
    return next(specifier, context);
}
