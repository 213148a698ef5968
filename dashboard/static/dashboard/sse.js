// Server-Sent Events read from a fetch body, by the WHATWG rules (EventSource cannot POST):
// an event ends at a blank line; a line starting ":" is a comment (the server's keep-alives
// while a long prompt is read or a request waits); "event:" names the event; several
// "data:" lines join with "\n"; CR, LF and CRLF all end a line. An event cut off by the end
// of the stream is dropped, as EventSource drops it.
"use strict";

async function* sseEvents(reader) {
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  let name = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
      // A CR last in the buffer may be half of a CRLF: wait for the next bytes.
      if (buffer[end] === "\r" && end === buffer.length - 1) break;
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
      if (line === "") {
        if (data.length) yield { event: name || "message", data: data.join("\n") };
        data = [];
        name = "";
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "data") data.push(text);
        else if (field === "event") name = text;
      }
    }
  }
}

window.sseEvents = sseEvents;
