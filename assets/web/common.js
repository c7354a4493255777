// Shared helpers of the mini web apps. Each app is built from the parameters in the URL query
// (the harness draws them from the episode's seed) and exposes its checked state through
// window.__state(), which the harness calls to score the episode; the agent only sees pixels.
"use strict";

const params = new URLSearchParams(location.search);

/** A "|"-separated list parameter; "a:b" entries split into pairs by pairs(). */
function list(name) {
  const value = params.get(name);
  return value ? value.split("|") : [];
}

function pairs(name) {
  return list(name).map((entry) => entry.split(":"));
}

/** el("button.primary", {onclick: f}, "Send") builds <button class="primary">Send</button>. */
function el(spec, props, ...children) {
  const [tag, ...classes] = spec.split(".");
  const node = document.createElement(tag);
  if (classes.length) node.className = classes.join(" ");
  for (const [key, value] of Object.entries(props || {})) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key.includes("-") || key === "role") node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}
