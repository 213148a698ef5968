import { generateObject } from 'ai';
import { z } from 'zod';
import { modelId, provider, report, sampling } from './common.mjs';

await report(async () => {
  const result = await generateObject({
    model: provider.chatModel(modelId),
    schemaName: 'City',
    schema: z.object({ name: z.string().max(40), country: z.string().max(40) }),
    prompt: 'Name a city in France.',
    ...sampling,
  });
  return { object: result.object, finishReason: result.finishReason };
});
