import { generateText } from 'ai';
import { modelId, provider, report, sampling } from './common.mjs';

await report(async () => {
  const result = await generateText({
    model: provider.chatModel(modelId),
    prompt: 'What is the capital of France?',
    ...sampling,
  });
  return { text: result.text, finishReason: result.finishReason, usage: result.usage };
});
