import { streamText } from 'ai';
import { modelId, provider, report, sampling } from './common.mjs';

await report(async () => {
  const result = streamText({
    model: provider.chatModel(modelId),
    prompt: 'What is the capital of France?',
    ...sampling,
  });
  const chunks = [];
  for await (const chunk of result.textStream) chunks.push(chunk);
  return { chunks, finishReason: await result.finishReason, usage: await result.usage };
});
